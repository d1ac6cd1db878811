/** Algorithm ids stored in the buffer header; never renumber (attach() reads them). */
export const ALGO_TOKEN_BUCKET = 1;
export const ALGO_LEAKY_BUCKET = 2;
export const ALGO_FIXED_WINDOW = 3;
export const ALGO_SLIDING_WINDOW = 4;
export const ALGO_SLIDING_LOG = 5;
export const ALGO_CONCURRENCY = 6;
export const ALGO_WARMING_BUCKET = 7;
