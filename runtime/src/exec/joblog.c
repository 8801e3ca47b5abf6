/* SPDX-License-Identifier: MIT */
/* joblog.c - the execution log: job events as JSON lines, off the hot path.
 *
 * Producers (workers, or anyone calling nres_joblog_emit) put fixed-size
 * events into a bounded lock-free ring (Vyukov's bounded queue: a CAS on
 * the enqueue position, a sequence number per cell, no lock); one writer
 * thread takes them in order, formats each as one JSON line into a buffer
 * and writes the buffer to the file (no fsync). Formatting and I/O cost the
 * producer nothing. The writer sleeps on a futex with a 10 ms timeout, so
 * producers only ring its doorbell when the ring is half full (or when
 * they wait for room): a busy producer makes no syscall.
 *
 * When the ring is full the mode decides: BLOCK makes the producer wait
 * for the writer to make room (never losing an event), DROP discards the
 * event and counts it (the producer never waits). The count is reported
 * by nres_joblog_counts. A pool without a log pays one predictable branch
 * per job (pool->log_ == NULL).
 *
 * Lines (t and start are nres_clock_now nanoseconds):
 *   {"ev":"executing","job":7,"parent":3,"gate":2,"worker":1,"t":123}
 *   {"ev":"completed","job":7,"parent":3,"gate":2,"worker":1,"t":456,
 *    "start":123,"outcome":"ok","result":0}
 *   {"ev":"note",...}   a line of the caller's (a baseline's)
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "exec/pool_int.h"

#define DEFAULT_CAPACITY 65536u
#define BUFFER_SIZE 65536u
#define LINE_MAX_BYTES 320u
#define WRITER_NAP (10 * NRES_MSEC)
#define BLOCK_NAP NRES_MSEC

typedef struct {
  NRES_ATOMIC(uint64_t) seq;
  nres_joblog_event_t ev;
} cell_t;

#define CELLS(log) ((cell_t *) (log)->ring_)
#define BUFFER(log) ((char *) ((cell_t *) (log)->ring_ + (log)->mask_ + 1))

static void kick(nres_joblog_t *log) {
  atomic_fetch_add_explicit(&log->kick_, 1, memory_order_seq_cst);
  nres__futex_wake(&log->kick_, 1);
}

/* ----------------------------------------------------------- producers */

/* Wait for the writer to make room (BLOCK mode). */
static void wait_for_room(nres_joblog_t *log, uint64_t pos) {
  cell_t *cell = &CELLS(log)[pos & log->mask_];
  uint32_t progress;

  atomic_fetch_add_explicit(&log->blocked_, 1, memory_order_seq_cst);
  progress = atomic_load_explicit(&log->progress_, memory_order_seq_cst);
  kick(log);
  if ((int64_t) (atomic_load_explicit(&cell->seq, memory_order_seq_cst) -
                 pos) < 0)
    nres__futex_wait(&log->progress_, progress, BLOCK_NAP);
  atomic_fetch_sub_explicit(&log->blocked_, 1, memory_order_seq_cst);
}

int nres_joblog_emit(nres_joblog_t *log, const nres_joblog_event_t *event) {
  uint64_t pos, mask;
  cell_t *cells, *cell;

  if (log == NULL || event == NULL || log->ring_ == NULL)
    return NRES_EINVAL;
  cells = CELLS(log);
  mask = log->mask_;
  pos = atomic_load_explicit(&log->enqueue_, memory_order_relaxed);
  for (;;) {
    int64_t diff;
    cell = &cells[pos & mask];
    diff = (int64_t) (atomic_load_explicit(&cell->seq, memory_order_acquire) -
                      pos);
    if (diff == 0) {
      if (atomic_compare_exchange_weak_explicit(&log->enqueue_, &pos, pos + 1,
                                                memory_order_relaxed,
                                                memory_order_relaxed))
        break;
    } else if (diff < 0) {
      /* The cell still holds the event from one lap ago: full. */
      if (log->mode_ == NRES_JOBLOG_DROP ||
          atomic_load_explicit(&log->stop_, memory_order_relaxed)) {
        nres__add(&log->dropped_, 1);
        return NRES_EFULL;
      }
      wait_for_room(log, pos);
      pos = atomic_load_explicit(&log->enqueue_, memory_order_relaxed);
    } else {
      pos = atomic_load_explicit(&log->enqueue_, memory_order_relaxed);
    }
  }
  cell->ev = *event;
  atomic_store_explicit(&cell->seq, pos + 1, memory_order_release);
  if (atomic_load_explicit(&log->sleeping_, memory_order_relaxed) &&
      pos - atomic_load_explicit(&log->dequeue_, memory_order_relaxed) >=
          mask / 2)
    kick(log);
  return 0;
}

/* -------------------------------------------------------------- writer */

static char *put_str(char *p, const char *s) {
  size_t n = strlen(s);
  memcpy(p, s, n);
  return p + n;
}

static char *put_i64(char *p, int64_t v) {
  if (v < 0) {
    *p++ = '-';
    return nres__put_u64(p, (uint64_t) 0 - (uint64_t) v);
  }
  return nres__put_u64(p, (uint64_t) v);
}

static char *format(char *p, const nres_joblog_event_t *ev) {
  static const char *const kinds[] = { "executing", "completed", "note" };

  p = put_str(p, "{\"ev\":\"");
  p = put_str(p, ev->kind < 3 ? kinds[ev->kind] : "unknown");
  p = put_str(p, "\",\"job\":");
  p = nres__put_u64(p, ev->job);
  p = put_str(p, ",\"parent\":");
  p = nres__put_u64(p, ev->parent);
  p = put_str(p, ",\"gate\":");
  p = nres__put_u64(p, ev->gate);
  p = put_str(p, ",\"worker\":");
  p = nres__put_u64(p, ev->worker);
  p = put_str(p, ",\"t\":");
  p = nres__put_u64(p, ev->time);
  if (ev->kind == NRES_JOBLOG_COMPLETED) {
    p = put_str(p, ",\"start\":");
    p = nres__put_u64(p, ev->start);
    p = put_str(p, ",\"outcome\":\"");
    p = put_str(p, nres_job_status_name(ev->status));
    p = put_str(p, "\",\"result\":");
    p = put_i64(p, ev->result);
  }
  return put_str(p, "}\n");
}

static void flush(nres_joblog_t *log, char *buf, size_t *len) {
  size_t done = 0;

  while (done < *len) {
    ssize_t n = write(log->fd_, buf + done, *len - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      uint32_t none = 0;
      atomic_compare_exchange_strong(&log->failed_, &none,
                                     (uint32_t) (n < 0 ? errno : EIO));
      break;   /* the events are lost; the writer keeps draining */
    }
    done += (size_t) n;
  }
  *len = 0;
}

/* Take every event published; returns how many. */
static uint64_t drain(nres_joblog_t *log, char *buf, size_t *len) {
  cell_t *cells = CELLS(log);
  uint64_t pos = atomic_load_explicit(&log->dequeue_, memory_order_relaxed);
  uint64_t taken = 0;

  for (;;) {
    cell_t *cell = &cells[pos & log->mask_];
    if (atomic_load_explicit(&cell->seq, memory_order_acquire) != pos + 1)
      break;
    *len = (size_t) (format(buf + *len, &cell->ev) - buf);
    atomic_store_explicit(&cell->seq, pos + log->mask_ + 1,
                          memory_order_release);
    pos++;
    taken++;
    if (*len > BUFFER_SIZE - LINE_MAX_BYTES)
      flush(log, buf, len);
    if ((taken & 255) == 0)
      atomic_store_explicit(&log->dequeue_, pos, memory_order_release);
  }
  atomic_store_explicit(&log->dequeue_, pos, memory_order_release);
  if (taken != 0) {
    nres__add(&log->written_, taken);
    if (atomic_load_explicit(&log->blocked_, memory_order_seq_cst)) {
      atomic_fetch_add_explicit(&log->progress_, 1, memory_order_seq_cst);
      nres__futex_wake(&log->progress_, INT_MAX);
    }
  }
  return taken;
}

static void *writer_main(void *arg) {
  nres_joblog_t *log = arg;
  char *buf = BUFFER(log);
  size_t len = 0;

  for (;;) {
    uint32_t seen;
    if (drain(log, buf, &len) != 0)
      continue;
    if (len != 0)
      flush(log, buf, &len);
    if (atomic_load_explicit(&log->stop_, memory_order_acquire) &&
        atomic_load_explicit(&log->dequeue_, memory_order_relaxed) ==
            atomic_load_explicit(&log->enqueue_, memory_order_acquire))
      break;
    atomic_store_explicit(&log->sleeping_, 1, memory_order_seq_cst);
    seen = atomic_load_explicit(&log->kick_, memory_order_seq_cst);
    if (!atomic_load_explicit(&log->stop_, memory_order_seq_cst))
      nres__futex_wait(&log->kick_, seen, WRITER_NAP);
    else
      nres__futex_wait(&log->kick_, seen, 100 * NRES_USEC);   /* in flight */
    atomic_store_explicit(&log->sleeping_, 0, memory_order_relaxed);
  }
  return NULL;
}

/* ----------------------------------------------------------- lifecycle */

int nres_joblog_init(nres_joblog_t *log, const char *path, uint32_t capacity,
                     int mode) {
  uint64_t i;
  int rc;

  if (log == NULL || path == NULL || *path == '\0' ||
      (mode != NRES_JOBLOG_BLOCK && mode != NRES_JOBLOG_DROP))
    return NRES_EINVAL;
  if (capacity == 0)
    capacity = DEFAULT_CAPACITY;
  if (capacity < 2 || (capacity & (capacity - 1)) || capacity > (1u << 26))
    return NRES_EINVAL;
  memset(log, 0, sizeof(*log));
  log->mask_ = capacity - 1;
  log->mode_ = mode;
  log->fd_ = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log->fd_ < 0)
    return -errno;
  log->ring_ = nres__malloc((size_t) capacity * sizeof(cell_t) + BUFFER_SIZE);
  if (log->ring_ == NULL) {
    close(log->fd_);
    return NRES_ENOMEM;
  }
  for (i = 0; i < capacity; i++)
    atomic_init(&CELLS(log)[i].seq, i);
  rc = pthread_create(&log->writer_, NULL, writer_main, log);
  if (rc != 0) {
    nres__free(log->ring_);
    log->ring_ = NULL;
    close(log->fd_);
    return rc == EAGAIN ? NRES_EAGAIN : NRES_ENOMEM;
  }
  return 0;
}

int nres_joblog_close(nres_joblog_t *log) {
  uint32_t failed;

  if (log == NULL || log->ring_ == NULL)
    return NRES_EINVAL;
  atomic_store_explicit(&log->stop_, 1, memory_order_seq_cst);
  kick(log);
  pthread_join(log->writer_, NULL);
  if (close(log->fd_) != 0 &&
      atomic_load_explicit(&log->failed_, memory_order_relaxed) == 0)
    atomic_store(&log->failed_, (uint32_t) errno);
  nres__free(log->ring_);
  log->ring_ = NULL;
  failed = atomic_load_explicit(&log->failed_, memory_order_relaxed);
  return failed != 0 ? -(int) failed : 0;
}

void nres_joblog_counts(const nres_joblog_t *log, uint64_t *written,
                        uint64_t *dropped) {
  if (written != NULL)
    *written = log != NULL ? nres__load(&log->written_) : 0;
  if (dropped != NULL)
    *dropped = log != NULL ? nres__load(&log->dropped_) : 0;
}
