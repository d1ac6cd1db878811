/**
 * The core's argument helpers, in one place for this part. `typeError` / `rangeError` add
 * Node's codes once the core's validate.ts has them; until then plain errors.
 */
import * as core from '../validate.js';

export {
  checkOptionsObject,
  enumOption,
  integerOption,
  keyError,
  permitsError,
  positiveNumberOption,
  show,
} from '../validate.js';

const maybe = core as unknown as {
  typeError?: (message: string) => TypeError;
  rangeError?: (message: string) => RangeError;
};

export function typeError(message: string): TypeError {
  return maybe.typeError ? maybe.typeError(message) : new TypeError(message);
}

export function rangeError(message: string): RangeError {
  return maybe.rangeError ? maybe.rangeError(message) : new RangeError(message);
}
