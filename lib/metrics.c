/* metrics.c — process-local histograms and Prometheus text format writers (see metrics.h). */
#include "lib/metrics.h"

#include <math.h>
#include <stdbool.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

atomic_ulong jb_metric_ops_direct, jb_metric_ops_queued;
atomic_ulong jb_metric_audit_batches, jb_metric_audit_batched;
JB_HISTOGRAM(jb_metric_audit_append, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
             0.5, 1, 2.5);

long long jb_metrics_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

long long jb_now_ms(void) { return jb_metrics_now_ns() / 1000000; }

void jb_histogram_observe(struct jb_histogram *h, long long ns) {
  if (ns < 0) ns = 0;
  double s = (double)ns / 1e9;
  int i = 0;
  while (i < h->n && s > h->bounds[i]) i++;
  atomic_fetch_add(&h->counts[i], 1);
  atomic_fetch_add(&h->sum_ns, (unsigned long long)ns);
}

static void escaped(FILE *out, const char *v) {
  for (; *v; v++) {
    if (*v == '\\')
      fputs("\\\\", out);
    else if (*v == '"')
      fputs("\\\"", out);
    else if (*v == '\n')
      fputs("\\n", out);
    else
      fputc(*v, out);
  }
}

static void number(FILE *out, double v) {
  if (isinf(v))
    fputs(v > 0 ? "+Inf" : "-Inf", out);
  else if (isnan(v))
    fputs("NaN", out);
  else if (v == (double)(long long)v && fabs(v) < 9e15)
    fprintf(out, "%lld", (long long)v);
  else
    fprintf(out, "%.9g", v);
}

void jb_prom_header(FILE *out, const char *name, const char *type, const char *help) {
  fprintf(out, "# HELP %s ", name);
  for (const char *p = help; *p; p++) { /* HELP escapes backslash and newline only */
    if (*p == '\\')
      fputs("\\\\", out);
    else if (*p == '\n')
      fputs("\\n", out);
    else
      fputc(*p, out);
  }
  fprintf(out, "\n# TYPE %s %s\n", name, type);
}

static void vsample(FILE *out, const char *name, double value, va_list ap) {
  fputs(name, out);
  const char *k = va_arg(ap, const char *);
  if (k) {
    fputc('{', out);
    for (bool first = true; k; k = va_arg(ap, const char *), first = false) {
      const char *v = va_arg(ap, const char *);
      fprintf(out, "%s%s=\"", first ? "" : ",", k);
      escaped(out, v ? v : "");
      fputc('"', out);
    }
    fputc('}', out);
  }
  fputc(' ', out);
  number(out, value);
  fputc('\n', out);
}

void jb_prom_sample(FILE *out, const char *name, double value, ...) {
  va_list ap;
  va_start(ap, value);
  vsample(out, name, value, ap);
  va_end(ap);
}

static void le_text(double b, char *buf, size_t len) {
  if (isinf(b))
    snprintf(buf, len, "+Inf");
  else
    snprintf(buf, len, "%g", b);
}

void jb_prom_histogram_values(FILE *out, const char *name, const char *help, const double *bounds,
                              int n, const long long *bucket_counts, double sum) {
  char bucket[128], le[32];
  jb_prom_header(out, name, "histogram", help);
  snprintf(bucket, sizeof bucket, "%s_bucket", name);
  for (int i = 0; i <= n; i++) {
    le_text(i < n ? bounds[i] : INFINITY, le, sizeof le);
    jb_prom_sample(out, bucket, (double)bucket_counts[i], "le", le, NULL);
  }
  char s[128], c[128];
  snprintf(s, sizeof s, "%s_sum", name);
  snprintf(c, sizeof c, "%s_count", name);
  jb_prom_sample(out, s, sum, NULL);
  jb_prom_sample(out, c, (double)bucket_counts[n], NULL);
}

void jb_prom_histogram(FILE *out, const char *name, const char *help, struct jb_histogram *h) {
  long long cum[JB_HIST_MAX_BUCKETS + 1];
  long long acc = 0;
  for (int i = 0; i <= h->n; i++) {
    acc += (long long)atomic_load(&h->counts[i]);
    cum[i] = acc;
  }
  jb_prom_histogram_values(out, name, help, h->bounds, h->n, cum,
                           (double)atomic_load(&h->sum_ns) / 1e9);
}
