/*
 * i2cshim: an LD_PRELOAD library that stands in for one Linux i2c-dev
 * device (/dev/i2c-N) and logs what a program writes to it, so the bytes
 * LCDd's hd44780 driver (ConnectionType=i2c) sends to a PCF8574 can be
 * replayed into testrig/lcdemu. Built by lcdd_test.go into a temporary
 * directory; never committed as a binary.
 *
 * Environment:
 *   I2CSHIM_DEVICE  the device path to fake, e.g. /dev/i2c-fake-1234
 *   I2CSHIM_LOG     the log file, opened once when the library loads
 *                   (before LCDd drops its privileges)
 *
 * Log lines, one per call on the fake device, with CLOCK_MONOTONIC in ns:
 *   O <ns>                 open
 *   A <ns> <addr hex>      ioctl(I2C_SLAVE, addr)
 *   W <ns> <addr> <hex>    write of the bytes (one I2C transaction)
 *   C <ns>                 close
 * Any other ioctl on the fake device fails with ENOTTY and is logged as
 *   I <ns> <request hex>
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define I2C_SLAVE 0x0703
#define I2C_SLAVE_FORCE 0x0706

static int fake_fd = -1;
static int log_fd = -1;
static unsigned long slave = 0;

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void logline(const char *s, size_t n)
{
	if (log_fd >= 0)
		syscall(SYS_write, log_fd, s, n);
}

__attribute__((constructor)) static void shim_init(void)
{
	const char *path = getenv("I2CSHIM_LOG");
	if (path)
		log_fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

static int is_fake(const char *path)
{
	const char *dev = getenv("I2CSHIM_DEVICE");
	return dev && path && strcmp(dev, path) == 0;
}

static int open_fake(void)
{
	/* A real descriptor (on /dev/null), so close and poll behave. */
	int fd = (int)syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDWR | O_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	fake_fd = fd;
	char line[64];
	int n = snprintf(line, sizeof line, "O %lld\n", now_ns());
	logline(line, (size_t)n);
	return fd;
}

/* The mode argument of open, open64 and openat, present with O_CREAT or O_TMPFILE. */
#define MODE_ARG(flags, last) \
	mode_t mode = 0; \
	if ((flags) & (O_CREAT | O_TMPFILE)) { \
		va_list ap; \
		va_start(ap, last); \
		mode = (mode_t)va_arg(ap, int); \
		va_end(ap); \
	}

/* real_open calls the libc function sym (open, open64 or openat). */
static int real_open(const char *sym, int dirfd, const char *path, int flags, mode_t mode)
{
	if (is_fake(path))
		return open_fake();
	if (strcmp(sym, "openat") == 0) {
		int (*real)(int, const char *, int, ...) = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, sym);
		return real(dirfd, path, flags, mode);
	}
	int (*real)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, sym);
	return real(path, flags, mode);
}

int open(const char *path, int flags, ...)
{
	MODE_ARG(flags, flags);
	return real_open("open", AT_FDCWD, path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
	MODE_ARG(flags, flags);
	return real_open("open64", AT_FDCWD, path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	MODE_ARG(flags, flags);
	return real_open("openat", dirfd, path, flags, mode);
}

int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	if (fd >= 0 && fd == fake_fd) {
		char line[64];
		int n;
		if (req == I2C_SLAVE || req == I2C_SLAVE_FORCE) {
			slave = (unsigned long)arg;
			n = snprintf(line, sizeof line, "A %lld %02lx\n", now_ns(), slave);
			logline(line, (size_t)n);
			return 0;
		}
		n = snprintf(line, sizeof line, "I %lld %lx\n", now_ns(), req);
		logline(line, (size_t)n);
		errno = ENOTTY;
		return -1;
	}
	static int (*real)(int, unsigned long, ...);
	if (!real)
		real = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
	return real(fd, req, arg);
}

ssize_t write(int fd, const void *buf, size_t count)
{
	if (fd >= 0 && fd == fake_fd) {
		char line[64 + 2 * 256];
		const unsigned char *b = buf;
		size_t m = count < 256 ? count : 256;
		int n = snprintf(line, sizeof line, "W %lld %02lx ", now_ns(), slave);
		for (size_t i = 0; i < m; i++)
			n += snprintf(line + n, sizeof line - (size_t)n, "%02x", b[i]);
		line[n++] = '\n';
		logline(line, (size_t)n);
		return (ssize_t)count;
	}
	return (ssize_t)syscall(SYS_write, fd, buf, count);
}

int close(int fd)
{
	if (fd >= 0 && fd == fake_fd) {
		char line[64];
		int n = snprintf(line, sizeof line, "C %lld\n", now_ns());
		logline(line, (size_t)n);
		fake_fd = -1;
	}
	return (int)syscall(SYS_close, fd);
}
