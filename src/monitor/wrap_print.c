/* The interposed printf family, err/warn, perror, error: the format and its string arguments within monitored chunks (wrap.h says what is covered and why). */
#include "wrap.h"

/* stdio functions that may hand a long string to write() directly (an unbuffered stream) */
WRAP(int, fputs, (const char* p, FILE* f), (p, f), string(p))
WRAP(int, fputs_unlocked, (const char* p, FILE* f), (p, f), string(p))
WRAP(int, puts, (const char* p), (p), string(p))

/* The printf family: glibc 2.36's vfprintf hands a piece of output longer than the stream's
   buffer (a long %s, or a long stretch of the format itself) to write() straight from where it
   lies; from a sampled page, write() failed with EFAULT and the output was lost (fprintf of a
   64 KiB string, its chunk's sampled pages protected).  The argument types come from glibc's
   parse_printf_format; each string argument (and the format) has its pages released up to its
   NUL, but only pages of monitored chunks are read for it: a %.*s argument need not end in a
   NUL, and the rest of the chunk is never released (the page a program prints a name from
   stays sampled).  Formats with more than 64 arguments have the first 64 looked at. */
static void printed(const char* s) { string_pages(s, true); }
static void printed_args(const char* fmt, va_list ap) {
  if (!_ca_monitor_active() || fmt == NULL) return;
  printed(fmt);
  int types[64];
  size_t n = parse_printf_format(fmt, 64, types);
  va_list a;
  va_copy(a, ap);
  for (size_t i = 0; i < n && i < 64; i++) {     /* each argument taken as it was passed */
    int t = types[i];
    if (t & PA_FLAG_PTR) { (void)va_arg(a, void*); continue; }
    switch (t & ~PA_FLAG_MASK) {
    case PA_INT:
      if (t & (PA_FLAG_LONG | PA_FLAG_LONG_LONG)) (void)va_arg(a, long long); else (void)va_arg(a, int);
      break;
    case PA_CHAR: case PA_WCHAR: (void)va_arg(a, int); break;
    case PA_STRING: printed(va_arg(a, const char*)); break;
    case PA_WSTRING: case PA_POINTER: (void)va_arg(a, void*); break;
    case PA_FLOAT: case PA_DOUBLE:
      if (t & PA_FLAG_LONG_DOUBLE) (void)va_arg(a, long double); else (void)va_arg(a, double);
      break;
    default: i = n; break;                         /* a type the program registered: stop */
    }
  }
  va_end(a);
}
typedef int (*vfprintf_fn)(FILE*, const char*, va_list);
typedef int (*vdprintf_fn)(int, const char*, va_list);
typedef int (*vfprintf_chk_fn)(FILE*, int, const char*, va_list);
typedef int (*vdprintf_chk_fn)(int, int, const char*, va_list);
int __vfprintf_chk(FILE* f, int flag, const char* fmt, va_list ap);
int __vdprintf_chk(int fd, int flag, const char* fmt, va_list ap);
int __vprintf_chk(int flag, const char* fmt, va_list ap);
int __printf_chk(int flag, const char* fmt, ...);
int __fprintf_chk(FILE* f, int flag, const char* fmt, ...);
int __dprintf_chk(int fd, int flag, const char* fmt, ...);
/* PRINTF(name, params, last, call): the variadic form, through the next v-form */
#define PRINTF(name, params, last, call) \
  ca_interpose int name params { va_list ap; va_start(ap, last); printed_args(fmt, ap); int r_ = call; va_end(ap); return r_; }
PRINTF(printf, (const char* fmt, ...), fmt, NEXT(vfprintf_fn, vfprintf)(stdout, fmt, ap))
PRINTF(fprintf, (FILE* f, const char* fmt, ...), fmt, NEXT(vfprintf_fn, vfprintf)(f, fmt, ap))
PRINTF(dprintf, (int fd, const char* fmt, ...), fmt, NEXT(vdprintf_fn, vdprintf)(fd, fmt, ap))
PRINTF(__printf_chk, (int flag, const char* fmt, ...), fmt, NEXT(vfprintf_chk_fn, __vfprintf_chk)(stdout, flag, fmt, ap))
PRINTF(__fprintf_chk, (FILE* f, int flag, const char* fmt, ...), fmt, NEXT(vfprintf_chk_fn, __vfprintf_chk)(f, flag, fmt, ap))
PRINTF(__dprintf_chk, (int fd, int flag, const char* fmt, ...), fmt, NEXT(vdprintf_chk_fn, __vdprintf_chk)(fd, flag, fmt, ap))
ca_interpose int vprintf(const char* fmt, va_list ap) { printed_args(fmt, ap); return NEXT(vfprintf_fn, vfprintf)(stdout, fmt, ap); }
ca_interpose int vfprintf(FILE* f, const char* fmt, va_list ap) { printed_args(fmt, ap); return NEXT(vfprintf_fn, vfprintf)(f, fmt, ap); }
ca_interpose int vdprintf(int fd, const char* fmt, va_list ap) { printed_args(fmt, ap); return NEXT(vdprintf_fn, vdprintf)(fd, fmt, ap); }
ca_interpose int __vprintf_chk(int flag, const char* fmt, va_list ap) { printed_args(fmt, ap); return NEXT(vfprintf_chk_fn, __vfprintf_chk)(stdout, flag, fmt, ap); }
ca_interpose int __vfprintf_chk(FILE* f, int flag, const char* fmt, va_list ap) { printed_args(fmt, ap); return NEXT(vfprintf_chk_fn, __vfprintf_chk)(f, flag, fmt, ap); }
ca_interpose int __vdprintf_chk(int fd, int flag, const char* fmt, va_list ap) { printed_args(fmt, ap); return NEXT(vdprintf_chk_fn, __vdprintf_chk)(fd, flag, fmt, ap); }

/* The err/warn family, perror, psignal and psiginfo: glibc prints them to stderr through its
   own vfprintf, not through the wrappers above, and to a stderr the program made buffered a long
   %s goes to write() straight from where it lies (strace of warnx("<%s>", s) with a 64 KiB s
   after setvbuf(stderr, NULL, _IOFBF, 4096): write(2, s, 65535)).  Unbuffered, as stderr
   starts, glibc copies through a buffer on its stack.  The variadic forms go through the
   v-forms here. */
typedef void (*vwarn_fn)(const char*, va_list);
typedef void (*verr_fn)(int, const char*, va_list);
ca_interpose void vwarn(const char* fmt, va_list ap) { printed_args(fmt, ap); NEXT(vwarn_fn, vwarn)(fmt, ap); }
ca_interpose void vwarnx(const char* fmt, va_list ap) { printed_args(fmt, ap); NEXT(vwarn_fn, vwarnx)(fmt, ap); }
ca_interpose void verr(int st, const char* fmt, va_list ap) { printed_args(fmt, ap); NEXT(verr_fn, verr)(st, fmt, ap); __builtin_unreachable(); }
ca_interpose void verrx(int st, const char* fmt, va_list ap) { printed_args(fmt, ap); NEXT(verr_fn, verrx)(st, fmt, ap); __builtin_unreachable(); }
ca_interpose void warn(const char* fmt, ...) { va_list ap; va_start(ap, fmt); vwarn(fmt, ap); va_end(ap); }
ca_interpose void warnx(const char* fmt, ...) { va_list ap; va_start(ap, fmt); vwarnx(fmt, ap); va_end(ap); }
ca_interpose void err(int st, const char* fmt, ...) { va_list ap; va_start(ap, fmt); verr(st, fmt, ap); }
ca_interpose void errx(int st, const char* fmt, ...) { va_list ap; va_start(ap, fmt); verrx(st, fmt, ap); }
static inline void printed_one(const char* s) { if (_ca_monitor_active()) printed(s); }
ca_interpose void perror(const char* s) { printed_one(s); NEXT(__typeof__(&perror), perror)(s); }
ca_interpose void psignal(int sig, const char* s) { printed_one(s); NEXT(__typeof__(&psignal), psignal)(sig, s); }
ca_interpose void psiginfo(const siginfo_t* info, const char* s) { printed_one(s); NEXT(__typeof__(&psiginfo), psiginfo)(info, s); }

/* error and error_at_line have no v-form in glibc to forward to: the message is formatted here,
   on the stack (on the heap when longer than 1 KiB; its first 1023 bytes when there is no memory
   for that), with the caller's errno for %m, and the real function prints it as "%s".  So glibc
   never writes from the program's pages, and its own part is unchanged: stdout flushed,
   error_print_progname, error_one_per_line, error_message_count, the exit status. */
static char* message(char* buf, size_t cap, const char* fmt, va_list ap) {
  int e = errno;
  va_list a;
  va_copy(a, ap);
  int n = vsnprintf(buf, cap, fmt, a);
  va_end(a);
  char* heap = NULL;
  if (n < 0) buf[0] = 0;
  else if ((size_t)n >= cap) { errno = e; if (vasprintf(&heap, fmt, ap) < 0) heap = NULL; }
  errno = e;
  return heap;
}
ca_interpose void error(int st, int errnum, const char* fmt, ...) {
  char buf[1024];
  va_list ap; va_start(ap, fmt);
  char* heap = message(buf, sizeof buf, fmt, ap);
  va_end(ap);
  NEXT(__typeof__(&error), error)(st, errnum, "%s", heap != NULL ? heap : buf);
  free(heap);
}
ca_interpose void error_at_line(int st, int errnum, const char* file, unsigned line, const char* fmt, ...) {
  char buf[1024];
  va_list ap; va_start(ap, fmt);
  char* heap = message(buf, sizeof buf, fmt, ap);
  va_end(ap);
  printed_one(file);
  NEXT(__typeof__(&error_at_line), error_at_line)(st, errnum, file, line, "%s", heap != NULL ? heap : buf);
  free(heap);
}

