/* Send and arrival stamps taken at the CycloneDDS C API, for the kit's DDS transport.
 *
 * Python's own send and receive paths (serialization, the binding's GIL-holding write, a
 * waitset wake-up, take, deserialization) cost several times what DDS itself does on a fast
 * link, and all of it would count as link latency. Here:
 *   - ft_write_stamped() reads the clock, writes it into the CDR buffer as a
 *     builtin_interfaces/Time at a given offset and calls dds_write() at once (without the GIL);
 *   - a data-available listener runs in the Cyclone thread that delivers a sample to the reader,
 *     reads the clock, takes the serialized samples and queues them with that arrival stamp;
 *     Python's reader thread sleeps in ft_queue_next (on the queue's eventfd) and gets them one by one.
 * Stamps are CLOCK_MONOTONIC plus a base the caller gives (its process clock's offset).
 *
 * Writers must belong to topics made by the cyclonedds Python binding: dds_write() takes that
 * binding's sample container, { pointer, size } of the serialized bytes (cyclonedds-python
 * clayer/pysertype.c, 0.10.x). The tests write through here and read through the binding.
 */
#include <dds/dds.h>
#include <dds/ddsi/ddsi_serdata.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define TAKE_BATCH 16
#define ENCAPSULATION_LE 1 /* low bit of the header's second byte: CDR_LE, PL_CDR_LE, CDR2_LE... */

typedef struct {
  void *usample;
  size_t usample_size;
} binding_sample_t;

typedef struct entry {
  struct entry *next;
  int32_t tag;
  int64_t arrival_ns;
  uint32_t size;
  unsigned char data[];
} entry_t;

typedef struct binding {
  struct binding *next;
  struct ft_queue *queue;
  int32_t tag;
} binding_t;

typedef struct ft_queue {
  pthread_mutex_t lock;
  entry_t *head, *tail;
  binding_t *bindings;
  int efd;
  int64_t base_ns;
  uint64_t dropped; /* samples that could not be queued (out of memory) */
} ft_queue_t;

static int64_t now_ns(int64_t base_ns) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + base_ns;
}

static void put_u32_le(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
  p[2] = (unsigned char)(v >> 16);
  p[3] = (unsigned char)(v >> 24);
}

/* builtin_interfaces/Time: int32 sec, uint32 nanosec (sec floors, nanosec in [0, 1e9)). */
static void put_time_le(unsigned char *p, int64_t ns) {
  int64_t sec = ns / 1000000000LL, nsec = ns % 1000000000LL;
  if (nsec < 0) {
    nsec += 1000000000LL;
    sec -= 1;
  }
  put_u32_le(p, (uint32_t)(int32_t)sec);
  put_u32_le(p + 4, (uint32_t)nsec);
}

/* The stamp (ns; the kit's clocks read boot or epoch time, so it is positive) or a negative DDS
 * return code: one return value, so Python needs no out-parameter. */
int64_t ft_write_stamped(dds_entity_t writer, unsigned char *buf, uint32_t size, uint32_t offset,
                         int64_t base_ns) {
  if (size < 4 || offset < 4 || offset + 8 > size || (buf[1] & 1) != ENCAPSULATION_LE)
    return DDS_RETCODE_BAD_PARAMETER;
  binding_sample_t sample = {buf, size};
  int64_t t = now_ns(base_ns);
  put_time_le(buf + offset, t);
  dds_return_t ret = dds_write(writer, &sample);
  return ret < 0 ? ret : t;
}

int64_t ft_now(int64_t base_ns) { return now_ns(base_ns); }

ft_queue_t *ft_queue_new(int64_t base_ns) {
  ft_queue_t *q = calloc(1, sizeof(*q));
  if (q == NULL)
    return NULL;
  q->efd = eventfd(0, EFD_CLOEXEC);
  if (q->efd < 0) {
    free(q);
    return NULL;
  }
  pthread_mutex_init(&q->lock, NULL);
  q->base_ns = base_ns;
  return q;
}

int ft_queue_fd(const ft_queue_t *q) { return q->efd; }

uint64_t ft_queue_dropped(ft_queue_t *q) {
  pthread_mutex_lock(&q->lock);
  uint64_t n = q->dropped;
  pthread_mutex_unlock(&q->lock);
  return n;
}

static int push(ft_queue_t *q, int32_t tag, int64_t arrival_ns, struct ddsi_serdata *sd) {
  uint32_t size = ddsi_serdata_size(sd);
  entry_t *e = malloc(sizeof(*e) + size);
  if (e == NULL) {
    pthread_mutex_lock(&q->lock);
    q->dropped++;
    pthread_mutex_unlock(&q->lock);
    return 0;
  }
  e->next = NULL;
  e->tag = tag;
  e->arrival_ns = arrival_ns;
  e->size = size;
  ddsi_serdata_to_ser(sd, 0, size, e->data);
  pthread_mutex_lock(&q->lock);
  if (q->tail)
    q->tail->next = e;
  else
    q->head = e;
  q->tail = e;
  pthread_mutex_unlock(&q->lock);
  return 1;
}

/* Runs in the Cyclone thread that made the sample available. Samples of one take share the
 * stamp read just before that take: none of them can have arrived later. */
static void on_data_available(dds_entity_t reader, void *arg) {
  binding_t *b = arg;
  struct ddsi_serdata *sd[TAKE_BATCH];
  dds_sample_info_t si[TAKE_BATCH];
  int queued = 0;
  for (;;) {
    int64_t arrival = now_ns(b->queue->base_ns);
    int n = dds_takecdr(reader, sd, TAKE_BATCH, si, DDS_ANY_STATE);
    if (n <= 0)
      break;
    for (int i = 0; i < n; i++) {
      if (si[i].valid_data)
        queued += push(b->queue, b->tag, arrival, sd[i]);
      ddsi_serdata_unref(sd[i]);
    }
    if (n < TAKE_BATCH)
      break;
  }
  if (queued) {
    uint64_t one = 1;
    ssize_t w = write(b->queue->efd, &one, sizeof(one));
    (void)w; /* only fails if the counter would overflow: the reader is awake anyway */
  }
}

/* Deliver the samples of ``reader`` to ``q`` with ``tag``. */
int ft_queue_attach(ft_queue_t *q, dds_entity_t reader, int32_t tag) {
  binding_t *b = calloc(1, sizeof(*b));
  if (b == NULL)
    return DDS_RETCODE_OUT_OF_RESOURCES;
  b->queue = q;
  b->tag = tag;
  dds_listener_t *listener = dds_create_listener(b);
  dds_lset_data_available(listener, on_data_available);
  dds_return_t ret = dds_set_listener(reader, listener);
  dds_delete_listener(listener);
  if (ret < 0) {
    free(b);
    return ret;
  }
  pthread_mutex_lock(&q->lock);
  b->next = q->bindings;
  q->bindings = b;
  pthread_mutex_unlock(&q->lock);
  /* samples that arrived before the listener was set would not trigger it */
  on_data_available(reader, b);
  return 0;
}

/* The oldest queued sample: returns its size and removes it, 0 if the queue is empty, or
 * -size (leaving it queued) if ``cap`` is too small. */
int64_t ft_queue_pop(ft_queue_t *q, int32_t *tag, int64_t *arrival_ns, unsigned char *buf, uint32_t cap) {
  pthread_mutex_lock(&q->lock);
  entry_t *e = q->head;
  if (e == NULL) {
    pthread_mutex_unlock(&q->lock);
    return 0;
  }
  if (e->size > cap) {
    pthread_mutex_unlock(&q->lock);
    return -(int64_t)e->size;
  }
  q->head = e->next;
  if (q->head == NULL)
    q->tail = NULL;
  pthread_mutex_unlock(&q->lock);
  *tag = e->tag;
  *arrival_ns = e->arrival_ns;
  memcpy(buf, e->data, e->size);
  int64_t size = e->size;
  free(e);
  return size;
}

/* ft_queue_pop, waiting first if the queue is empty: the caller's thread sleeps in the kernel
 * until the listener queues a sample or ft_queue_wake is called (then 0 if nothing came). One
 * call from Python per sample instead of a read of the fd and a pop. */
int64_t ft_queue_next(ft_queue_t *q, int32_t *tag, int64_t *arrival_ns, unsigned char *buf, uint32_t cap) {
  int64_t size = ft_queue_pop(q, tag, arrival_ns, buf, cap);
  if (size != 0)
    return size;
  uint64_t count;
  ssize_t r = read(q->efd, &count, sizeof(count));
  (void)r; /* EINTR: the caller asks again */
  return ft_queue_pop(q, tag, arrival_ns, buf, cap);
}

/* Wake a thread waiting on the queue's fd (for shutdown). */
void ft_queue_wake(ft_queue_t *q) {
  uint64_t one = 1;
  ssize_t w = write(q->efd, &one, sizeof(one));
  (void)w;
}

/* Only after every attached reader is deleted (Cyclone waits for running listeners then). */
void ft_queue_free(ft_queue_t *q) {
  for (entry_t *e = q->head, *next; e; e = next) {
    next = e->next;
    free(e);
  }
  for (binding_t *b = q->bindings, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  close(q->efd);
  pthread_mutex_destroy(&q->lock);
  free(q);
}
