/*
 * C11 atomics baseline for native-bench (built by c11.mjs: cc -O2 -pthread).
 *
 *   c11_atomics [batch] [reps] [duration_ms] [cont_reps]
 *
 * Single thread: seq_cst CAS on a 32-bit and a 64-bit word and fetch_add on a 32-bit word,
 * timed in batches of `batch` ops, `reps` batches, median and p99 of ns/op over batches.
 * Two threads: CAS-increment loops (load, then compare_exchange_weak until it succeeds) on
 * the same word, on two words of one cache line, and on words 256 bytes apart, each for
 * `duration_ms`, `cont_reps` times (interleaved); median aggregate ops/s over the rounds in
 * which every thread had at least 90% of a CPU. Threads are not
 * pinned (the JS workers cannot be either). Prints one JSON line.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(128) _Atomic uint32_t words[256];
static _Alignas(128) _Atomic uint64_t words64[16];
static _Alignas(128) atomic_int go;
static _Alignas(128) atomic_int stop_flag;
static _Alignas(128) atomic_int ready;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank quantile of a sorted array (same definition as lib.mjs). */
static double quantile(const double *s, int n, double q) {
  int i = (int)((q * n) + 0.999999999) - 1;
  if (i < 0) i = 0;
  if (i >= n) i = n - 1;
  return s[i];
}

static volatile uint64_t sink;

static double batch_cas32(long n) {
  _Atomic uint32_t *w = &words[0];
  uint32_t v = atomic_load(w);
  uint64_t ok = 0, t0 = now_ns();
  for (long i = 0; i < n; i++) {
    uint32_t e = v;
    if (atomic_compare_exchange_strong(w, &e, v + 1)) {
      v++;
      ok++;
    } else {
      v = e;
    }
  }
  uint64_t t1 = now_ns();
  sink += ok;
  return (double)(t1 - t0) / (double)n;
}

static double batch_cas64(long n) {
  _Atomic uint64_t *w = &words64[0];
  uint64_t v = atomic_load(w);
  uint64_t ok = 0, t0 = now_ns();
  for (long i = 0; i < n; i++) {
    uint64_t e = v;
    if (atomic_compare_exchange_strong(w, &e, v + 1)) {
      v++;
      ok++;
    } else {
      v = e;
    }
  }
  uint64_t t1 = now_ns();
  sink += ok;
  return (double)(t1 - t0) / (double)n;
}

static double batch_fetch_add32(long n) {
  _Atomic uint32_t *w = &words[1];
  uint64_t acc = 0, t0 = now_ns();
  for (long i = 0; i < n; i++) acc += atomic_fetch_add(w, 1);
  uint64_t t1 = now_ns();
  sink += acc;
  return (double)(t1 - t0) / (double)n;
}

static void single(const char *name, double (*fn)(long), long batch, int reps, int comma) {
  double *v = malloc(sizeof(double) * (size_t)reps);
  for (int i = 0; i < 3; i++) fn(batch); /* warm-up */
  for (int r = 0; r < reps; r++) v[r] = fn(batch);
  qsort(v, (size_t)reps, sizeof(double), cmp_double);
  printf("\"%s\":{\"medianNs\":%.3f,\"p99Ns\":%.3f}%s", name, quantile(v, reps, 0.5),
         quantile(v, reps, 0.99), comma ? "," : "");
  free(v);
}

struct targ {
  int idx;
  uint64_t count;
  double share; /* thread CPU time / wall time while running */
};

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *cas_thread(void *p) {
  struct targ *a = p;
  _Atomic uint32_t *w = &words[a->idx];
  uint64_t c = 0;
  atomic_fetch_add(&ready, 1);
  while (!atomic_load_explicit(&go, memory_order_acquire)) {
  }
  uint64_t c0 = thread_cpu_ns(), w0 = now_ns();
  while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
    for (int k = 0; k < 256; k++) {
      uint32_t v = atomic_load_explicit(w, memory_order_relaxed);
      while (!atomic_compare_exchange_weak(w, &v, v + 1)) {
      }
    }
    c += 256;
  }
  a->count = c;
  a->share = (double)(thread_cpu_ns() - c0) / (double)(now_ns() - w0);
  return NULL;
}

/*
 * One round with `nt` threads on word indexes idx[]; returns aggregate ops/s and, in
 * *share, the smallest CPU-time / wall-time ratio of the threads (below ~0.9 the machine
 * took a core away and the threads did not really run at the same time).
 */
static double contention_round(int nt, const int *idx, int ms, double *share) {
  pthread_t th[2];
  struct targ args[2];
  for (int i = 0; i < 256; i++) atomic_store(&words[i], 0);
  atomic_store(&go, 0);
  atomic_store(&stop_flag, 0);
  atomic_store(&ready, 0);
  for (int i = 0; i < nt; i++) {
    args[i].idx = idx[i];
    args[i].count = 0;
    if (pthread_create(&th[i], NULL, cas_thread, &args[i]) != 0) {
      perror("pthread_create");
      exit(1);
    }
  }
  while (atomic_load(&ready) < nt) {
  }
  uint64_t t0 = now_ns();
  atomic_store_explicit(&go, 1, memory_order_release);
  struct timespec d = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&d, NULL);
  atomic_store(&stop_flag, 1);
  uint64_t t1 = now_ns();
  uint64_t total = 0;
  *share = 1e9;
  for (int i = 0; i < nt; i++) {
    pthread_join(th[i], NULL);
    total += args[i].count;
    if (args[i].share < *share) *share = args[i].share;
  }
  uint64_t in_words = atomic_load(&words[idx[0]]);
  if (nt > 1 && idx[1] != idx[0]) in_words += atomic_load(&words[idx[1]]);
  if (in_words != total) {
    fprintf(stderr, "lost updates: %llu != %llu\n", (unsigned long long)in_words,
            (unsigned long long)total);
    exit(1);
  }
  return (double)total / ((double)(t1 - t0) / 1e9);
}

int main(int argc, char **argv) {
  long batch = argc > 1 ? atol(argv[1]) : 10000000;
  int reps = argc > 2 ? atoi(argv[2]) : 25;
  int ms = argc > 3 ? atoi(argv[3]) : 250;
  int creps = argc > 4 ? atoi(argv[4]) : 7;
  if (batch < 1 || reps < 1 || ms < 1 || creps < 1 || creps > 64) {
    fprintf(stderr, "usage: %s [batch] [reps] [duration_ms] [cont_reps<=64]\n", argv[0]);
    return 2;
  }

  printf("{");
  single("cas32", batch_cas32, batch, reps, 1);
  single("cas64", batch_cas64, batch, reps, 1);
  single("fetchAdd32", batch_fetch_add32, batch, reps, 1);

  /* Rounds are interleaved over the cases; a round where a thread got less than 90% of a
   * CPU is set aside and retried (up to 3x), falling back to all rounds if it never clears. */
  static const int cases[4][3] = {{1, 0, 0}, {2, 0, 0}, {2, 0, 1}, {2, 0, 64}};
  static const char *names[4] = {"oneThread", "sameWord", "sameLine", "separateLines"};
  double ok[4][64], all[4][192];
  int nok[4] = {0}, nall[4] = {0};
  double share;
  for (int c = 0; c < 4; c++) contention_round(cases[c][0], &cases[c][1], 20, &share);
  for (int a = 0; a < 3 * creps; a++) {
    int pending = 0;
    for (int c = 0; c < 4; c++) {
      if (nok[c] >= creps) continue;
      pending = 1;
      double ops = contention_round(cases[c][0], &cases[c][1], ms, &share);
      all[c][nall[c]++] = ops;
      if (share >= 0.9) ok[c][nok[c]++] = ops;
    }
    if (!pending) break;
  }
  for (int c = 0; c < 4; c++) {
    double *v = nok[c] > 0 ? ok[c] : all[c];
    int n = nok[c] > 0 ? nok[c] : nall[c];
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    printf("\"%s\":{\"opsPerSec\":%.0f,\"min\":%.0f,\"max\":%.0f,\"valid\":%d,\"rounds\":%d}%s",
           names[c], quantile(v, n, 0.5), v[0], v[n - 1], nok[c], nall[c], c < 3 ? "," : "");
  }
  printf(",\"sink\":%llu}\n", (unsigned long long)(sink % 1000));
  return 0;
}
