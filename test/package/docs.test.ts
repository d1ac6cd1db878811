import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// The user documentation: the README, docs/, the bench's and the examples' READMEs.
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PAGES = [
  'README.md',
  'bench/README.md',
  'examples/README.md',
  'native-bench/README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

const read = (page: string) => readFileSync(join(ROOT, page), 'utf8');
const withoutCode = (text: string) => text.replace(/```[\s\S]*?```/g, '');

/** GitHub's anchors for a page's headings (`## \`ERR_X\`` → `err_x`). */
function anchorsOf(page: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const [, heading] of withoutCode(read(page)).matchAll(/^#{1,6}\s+(.*)$/gm)) {
    const slug = (heading as string)
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}_\- ]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    out.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return out;
}

/** Every .ts file under src/. */
function sources(dir = join(ROOT, 'src')): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? sources(p) : p.endsWith('.ts') ? [p] : [];
  });
}

describe('the documentation', () => {
  it('has no relative link to a missing file or heading', () => {
    const broken: string[] = [];
    for (const page of PAGES) {
      if (!existsSync(join(ROOT, page))) continue;
      for (const [, url] of withoutCode(read(page)).matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^[a-z]+:/.test(url as string)) continue;
        const [target, fragment] = (url as string).split('#') as [string, string | undefined];
        const file = target === '' ? page : normalize(join(dirname(page), target));
        if (!existsSync(join(ROOT, file))) broken.push(`${page}: ${url} (no such file)`);
        else if (fragment && file.endsWith('.md') && !anchorsOf(file).has(fragment)) {
          broken.push(`${page}: ${url} (no such heading)`);
        }
      }
    }
    expect(broken).toEqual([]);
  });

  it('keeps the README within 300 lines and 25 KB, and the bench README within 200 lines', () => {
    expect(read('README.md').split('\n').length).toBeLessThanOrEqual(301);
    expect(Buffer.byteLength(read('README.md'))).toBeLessThanOrEqual(25 * 1024);
    expect(read('bench/README.md').split('\n').length).toBeLessThanOrEqual(201);
  });

  it('gives every error and warning code the source raises a heading in docs/errors.md', () => {
    const codes = new Set<string>();
    for (const file of sources()) {
      for (const [, code] of readFileSync(file, 'utf8').matchAll(
        /['"`]((?:ERR|ATOMIC_LIMITER)_[A-Z0-9_]+)['"`]/g,
      )) {
        codes.add(code as string);
      }
    }
    const anchors = anchorsOf('docs/errors.md');
    const missing = [...codes].filter((c) => !anchors.has(c.toLowerCase()));
    expect(codes.size).toBeGreaterThan(5);
    expect(missing).toEqual([]);
  });
});
