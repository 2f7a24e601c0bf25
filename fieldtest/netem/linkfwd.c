/*
 * linkfwd: userspace link emulator between two TAP devices (the kit's fallback when the kernel
 * has no netem). Frames are forwarded unchanged, so ARP, multicast and any protocol pass.
 * Per direction it applies: random and Gilbert-Elliott loss, a rate limit with a packet queue,
 * a base delay plus time-correlated jitter, and (unless reordering is allowed) FIFO order.
 *
 * usage: linkfwd NETNS_A TAP_A NETNS_B TAP_B     ("-" as NETNS means the current namespace)
 * Direction a2b carries frames read from TAP_A to TAP_B; b2a the reverse.
 * Control on stdin, one command a line, each answered by one line on stdout:
 *   set a2b|b2a key=value ...  -> "ok"      (keys: delay_ns jitter_ns tau_ns loss ge_p ge_r
 *                                            ge_bad ge_good rate_bps limit multicast reorder)
 *   link on|off               -> "ok"       (off: every arriving frame is dropped: an outage)
 *   seed N                    -> "ok"
 *   stats                     -> one JSON object
 *   spin NS                   -> "ok"       (busy-wait NS before each departure; default 100 us)
 *   reset                     -> "ok"       (clears counters and the lateness record)
 * End of stdin ends the program, so it never outlives the Python process that started it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define SLOT_BYTES 2048
#define NSLOTS 4096
#define LATE_RING 65536
#define READ_BURST 64

typedef struct {
    int64_t delay_ns, jitter_ns, tau_ns;
    double loss, ge_p, ge_r, ge_bad, ge_good; /* probabilities in [0, 1] */
    double rate_bps;                          /* 0: unlimited */
    int limit, multicast, reorder;
} params_t;

typedef struct {
    uint64_t s;
} rng_t;

typedef struct {
    const char *name;
    params_t p;
    int in_fd, out_fd;
    unsigned char *slots;
    int64_t due[NSLOTS];
    uint64_t order[NSLOTS];
    int len[NSLOTS];
    int heap[NSLOTS], nheap;
    int freelist[NSLOTS], nfree;
    uint64_t next_order;
    int64_t last_due, tx_free_at;
    int64_t knot_index;
    double knot_a, knot_b; /* jitter values at the current and the next knot, in ns */
    int knots_valid, ge_bad_state;
    rng_t rng_loss, rng_jitter;
    uint64_t rx, tx, drop_loss, drop_queue, drop_outage, drop_mcast, drop_oversize, write_err;
    int32_t late_us[LATE_RING];
    uint64_t late_count;
    int64_t late_max_ns;
} dir_t;

static int link_up = 1;
static int64_t spin_ns = 100000; /* busy-wait this long before a departure: wakeups are late */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* splitmix64: small, fast, good enough for emulation randomness */
static uint64_t rng_next(rng_t *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double rng_uniform(rng_t *r) { return (rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

static double rng_normal(rng_t *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static void seed_dir(dir_t *d, uint64_t seed, uint64_t salt) {
    d->rng_loss.s = seed ^ (0x1234567ULL * (salt + 1));
    d->rng_jitter.s = seed ^ (0x89ABCDEFULL * (salt + 7));
    d->knots_valid = 0;
    d->ge_bad_state = 0;
}

/*
 * Jitter is a piecewise-linear curve through normal knots spaced tau apart, so the delay of
 * consecutive packets is correlated and changes slowly: FIFO order then costs (almost) no extra
 * delay, unlike independent per-packet jitter. Knots are scaled by sqrt(1.5) so that the curve's
 * variance, averaged over time, equals jitter^2.
 */
static double jitter_at(dir_t *d, int64_t t) {
    if (d->p.jitter_ns <= 0 || d->p.tau_ns <= 0) return 0.0;
    double sigma = (double)d->p.jitter_ns * 1.224744871391589;
    int64_t k = t / d->p.tau_ns;
    if (!d->knots_valid || k < d->knot_index || k > d->knot_index + 1) {
        d->knot_a = sigma * rng_normal(&d->rng_jitter);
        d->knot_b = sigma * rng_normal(&d->rng_jitter);
        d->knot_index = k;
        d->knots_valid = 1;
    } else if (k == d->knot_index + 1) {
        d->knot_a = d->knot_b;
        d->knot_b = sigma * rng_normal(&d->rng_jitter);
        d->knot_index = k;
    }
    double u = (double)(t - k * d->p.tau_ns) / (double)d->p.tau_ns;
    return d->knot_a + (d->knot_b - d->knot_a) * u;
}

static int lose_packet(dir_t *d) {
    rng_t *r = &d->rng_loss;
    if (d->p.ge_p > 0.0 || d->ge_bad_state) {
        if (d->ge_bad_state) {
            if (rng_uniform(r) < d->p.ge_r) d->ge_bad_state = 0;
        } else if (rng_uniform(r) < d->p.ge_p) {
            d->ge_bad_state = 1;
        }
        double state_loss = d->ge_bad_state ? d->p.ge_bad : d->p.ge_good;
        if (state_loss > 0.0 && rng_uniform(r) < state_loss) return 1;
    }
    return d->p.loss > 0.0 && rng_uniform(r) < d->p.loss;
}

static int heap_less(dir_t *d, int a, int b) {
    if (d->due[a] != d->due[b]) return d->due[a] < d->due[b];
    return d->order[a] < d->order[b];
}

static void heap_push(dir_t *d, int slot) {
    int i = d->nheap++;
    d->heap[i] = slot;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!heap_less(d, d->heap[i], d->heap[parent])) break;
        int tmp = d->heap[i];
        d->heap[i] = d->heap[parent];
        d->heap[parent] = tmp;
        i = parent;
    }
}

static int heap_pop(dir_t *d) {
    int top = d->heap[0];
    d->heap[0] = d->heap[--d->nheap];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < d->nheap && heap_less(d, d->heap[l], d->heap[m])) m = l;
        if (r < d->nheap && heap_less(d, d->heap[r], d->heap[m])) m = r;
        if (m == i) break;
        int tmp = d->heap[i];
        d->heap[i] = d->heap[m];
        d->heap[m] = tmp;
        i = m;
    }
    return top;
}

static int is_multicast_frame(const unsigned char *frame, int len) {
    static const unsigned char bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    return len >= 6 && (frame[0] & 1) && memcmp(frame, bcast, 6) != 0;
}

static void enqueue(dir_t *d, const unsigned char *frame, int len, int64_t t) {
    d->rx++;
    if (!link_up) { d->drop_outage++; return; }
    if (!d->p.multicast && is_multicast_frame(frame, len)) { d->drop_mcast++; return; }
    if (len > SLOT_BYTES) { d->drop_oversize++; return; }
    if (lose_packet(d)) { d->drop_loss++; return; }
    if (d->nheap >= d->p.limit || d->nfree == 0) { d->drop_queue++; return; }

    int64_t tx_end = t;
    if (d->p.rate_bps > 0.0) {
        int64_t start = d->tx_free_at > t ? d->tx_free_at : t;
        tx_end = start + (int64_t)((double)len * 8.0e9 / d->p.rate_bps);
        d->tx_free_at = tx_end;
    }
    double delay = (double)d->p.delay_ns + jitter_at(d, t);
    if (delay < 0.0) delay = 0.0;
    int64_t due = tx_end + (int64_t)delay;
    if (!d->p.reorder) {
        if (due < d->last_due) due = d->last_due;
        d->last_due = due;
    }
    int slot = d->freelist[--d->nfree];
    memcpy(d->slots + (size_t)slot * SLOT_BYTES, frame, (size_t)len);
    d->len[slot] = len;
    d->due[slot] = due;
    d->order[slot] = d->next_order++;
    heap_push(d, slot);
}

static void record_lateness(dir_t *d, int64_t late) {
    if (late < 0) late = 0;
    if (late > d->late_max_ns) d->late_max_ns = late;
    int64_t us = late / 1000;
    d->late_us[d->late_count % LATE_RING] = us > INT32_MAX ? INT32_MAX : (int32_t)us;
    d->late_count++;
}

static void flush_due(dir_t *d) {
    while (d->nheap > 0) {
        int64_t t = now_ns();
        int slot = d->heap[0];
        if (d->due[slot] > t) return;
        heap_pop(d);
        ssize_t n = write(d->out_fd, d->slots + (size_t)slot * SLOT_BYTES, (size_t)d->len[slot]);
        if (n < 0) d->write_err++; else d->tx++;
        record_lateness(d, t - d->due[slot]);
        d->freelist[d->nfree++] = slot;
    }
}

static void drain(dir_t *d) {
    static unsigned char buf[65536];
    for (int i = 0; i < READ_BURST; i++) {
        ssize_t n = read(d->in_fd, buf, sizeof buf);
        if (n <= 0) return;
        enqueue(d, buf, (int)n, now_ns());
    }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void print_dir_stats(dir_t *d) {
    uint64_t n = d->late_count < LATE_RING ? d->late_count : LATE_RING;
    int32_t p50 = 0, p90 = 0, p99 = 0;
    if (n > 0) {
        int32_t *copy = malloc(n * sizeof(int32_t));
        memcpy(copy, d->late_us, n * sizeof(int32_t));
        qsort(copy, n, sizeof(int32_t), cmp_i32);
        p50 = copy[(n - 1) / 2];
        p90 = copy[(uint64_t)((n - 1) * 0.90)];
        p99 = copy[(uint64_t)((n - 1) * 0.99)];
        free(copy);
    }
    printf("\"%s\": {\"rx\": %llu, \"tx\": %llu, \"drop_loss\": %llu, \"drop_queue\": %llu, "
           "\"drop_outage\": %llu, \"drop_multicast\": %llu, \"drop_oversize\": %llu, "
           "\"write_errors\": %llu, \"queued\": %d, \"late_p50_us\": %d, \"late_p90_us\": %d, "
           "\"late_p99_us\": %d, "
           "\"late_max_us\": %lld}",
           d->name, (unsigned long long)d->rx, (unsigned long long)d->tx,
           (unsigned long long)d->drop_loss, (unsigned long long)d->drop_queue,
           (unsigned long long)d->drop_outage, (unsigned long long)d->drop_mcast,
           (unsigned long long)d->drop_oversize, (unsigned long long)d->write_err, d->nheap, p50,
           p90, p99, (long long)(d->late_max_ns / 1000));
}

static void reset_stats(dir_t *d) {
    d->rx = d->tx = d->drop_loss = d->drop_queue = d->drop_outage = 0;
    d->drop_mcast = d->drop_oversize = d->write_err = 0;
    d->late_count = 0;
    d->late_max_ns = 0;
}

static int set_param(params_t *p, const char *key, const char *val) {
    char *end;
    double v = strtod(val, &end);
    if (end == val || *end != '\0' || !isfinite(v) || v < 0) return -1;
    if (!strcmp(key, "delay_ns")) p->delay_ns = (int64_t)v;
    else if (!strcmp(key, "jitter_ns")) p->jitter_ns = (int64_t)v;
    else if (!strcmp(key, "tau_ns")) p->tau_ns = (int64_t)v;
    else if (!strcmp(key, "loss")) p->loss = v;
    else if (!strcmp(key, "ge_p")) p->ge_p = v;
    else if (!strcmp(key, "ge_r")) p->ge_r = v;
    else if (!strcmp(key, "ge_bad")) p->ge_bad = v;
    else if (!strcmp(key, "ge_good")) p->ge_good = v;
    else if (!strcmp(key, "rate_bps")) p->rate_bps = v;
    else if (!strcmp(key, "limit")) p->limit = v > NSLOTS ? NSLOTS : (int)v;
    else if (!strcmp(key, "multicast")) p->multicast = v != 0.0;
    else if (!strcmp(key, "reorder")) p->reorder = v != 0.0;
    else return -1;
    return 0;
}

/* "set a2b k=v k=v ..." applies all pairs or none, so a typo never half-changes a link */
static const char *cmd_set(dir_t **dirs, char *args) {
    char *save = NULL, *dname = strtok_r(args, " \t", &save);
    dir_t *d = NULL;
    if (dname && !strcmp(dname, "a2b")) d = dirs[0];
    if (dname && !strcmp(dname, "b2a")) d = dirs[1];
    if (!d) return "error: direction must be a2b or b2a";
    params_t p = d->p;
    for (char *tok = strtok_r(NULL, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) return "error: expected key=value";
        *eq = '\0';
        if (set_param(&p, tok, eq + 1) < 0) return "error: bad key or value";
    }
    int64_t old_jitter = d->p.jitter_ns, old_tau = d->p.tau_ns;
    d->p = p;
    if (p.jitter_ns != old_jitter || p.tau_ns != old_tau) d->knots_valid = 0;
    if (p.rate_bps <= 0.0) d->tx_free_at = 0;
    return "ok";
}

static void handle_command(dir_t **dirs, char *line) {
    const char *reply = "ok";
    if (!strncmp(line, "set ", 4)) {
        reply = cmd_set(dirs, line + 4);
    } else if (!strcmp(line, "link on")) {
        link_up = 1;
    } else if (!strcmp(line, "link off")) {
        link_up = 0;
    } else if (!strncmp(line, "seed ", 5)) {
        uint64_t seed = strtoull(line + 5, NULL, 10);
        seed_dir(dirs[0], seed, 0);
        seed_dir(dirs[1], seed, 1);
    } else if (!strncmp(line, "spin ", 5)) {
        spin_ns = strtoll(line + 5, NULL, 10);
        if (spin_ns < 0) spin_ns = 0;
    } else if (!strcmp(line, "reset")) {
        reset_stats(dirs[0]);
        reset_stats(dirs[1]);
    } else if (!strcmp(line, "stats")) {
        printf("{\"link_up\": %d, ", link_up);
        print_dir_stats(dirs[0]);
        printf(", ");
        print_dir_stats(dirs[1]);
        printf("}\n");
        fflush(stdout);
        return;
    } else {
        reply = "error: unknown command";
    }
    printf("%s\n", reply);
    fflush(stdout);
}

/* Returns 0 on end of input. */
static int read_commands(dir_t **dirs) {
    static char line[8192];
    static size_t used = 0;
    ssize_t n = read(STDIN_FILENO, line + used, sizeof line - 1 - used);
    if (n == 0) return 0;
    if (n < 0) return errno == EINTR || errno == EAGAIN;
    used += (size_t)n;
    line[used] = '\0';
    char *start = line, *nl;
    while ((nl = strchr(start, '\n')) != NULL) {
        *nl = '\0';
        if (nl > start && nl[-1] == '\r') nl[-1] = '\0';
        if (*start) handle_command(dirs, start);
        start = nl + 1;
    }
    used = strlen(start);
    memmove(line, start, used);
    if (used == sizeof line - 1) used = 0; /* an absurdly long line: drop it */
    return 1;
}

static int open_tap(const char *netns, const char *name) {
    if (strcmp(netns, "-") != 0) {
        char path[512];
        snprintf(path, sizeof path, "/run/netns/%s", netns);
        int nsfd = open(path, O_RDONLY | O_CLOEXEC);
        if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) < 0) {
            fprintf(stderr, "linkfwd: cannot enter network namespace %s: %s\n", netns, strerror(errno));
            return -1;
        }
        close(nsfd);
    }
    /* the tun socket belongs to the namespace current at open(), so open after setns */
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "linkfwd: cannot open /dev/net/tun: %s\n", strerror(errno));
        return -1;
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
        fprintf(stderr, "linkfwd: cannot attach to tap %s in %s: %s\n", name, netns, strerror(errno));
        return -1;
    }
    return fd;
}

static dir_t *new_dir(const char *name, int in_fd, int out_fd) {
    dir_t *d = calloc(1, sizeof(dir_t));
    if (!d) return NULL;
    d->slots = malloc((size_t)NSLOTS * SLOT_BYTES);
    if (!d->slots) return NULL;
    d->name = name;
    d->in_fd = in_fd;
    d->out_fd = out_fd;
    d->p.limit = 1000;
    d->p.multicast = 1;
    for (int i = 0; i < NSLOTS; i++) d->freelist[i] = NSLOTS - 1 - i;
    d->nfree = NSLOTS;
    return d;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: linkfwd NETNS_A TAP_A NETNS_B TAP_B\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_TIMERSLACK, 1UL); /* the default 50 us slack would show up as added delay */
    /* A real-time priority keeps busy neighbours (other tests, the twin's processes) from delaying
     * departures; the forwarder sleeps most of the time. Without the privilege it runs normally. */
    const char *rt = getenv("LINKFWD_RT_PRIORITY");
    struct sched_param sp = {.sched_priority = rt ? atoi(rt) : 10};
    int rt_ok = sp.sched_priority > 0 && sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
    int fd_a = open_tap(argv[1], argv[2]);
    if (fd_a < 0) return 1;
    int fd_b = open_tap(argv[3], argv[4]);
    if (fd_b < 0) return 1;

    dir_t *a2b = new_dir("a2b", fd_a, fd_b), *b2a = new_dir("b2a", fd_b, fd_a);
    if (!a2b || !b2a) return 1;
    dir_t *dirs[2] = {a2b, b2a};
    uint64_t seed = (uint64_t)now_ns() ^ ((uint64_t)getpid() << 32);
    seed_dir(a2b, seed, 0);
    seed_dir(b2a, seed, 1);

    printf("ready%s\n", rt_ok ? " rt" : "");
    fflush(stdout);

    struct pollfd pfd[3] = {{fd_a, POLLIN, 0}, {fd_b, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
    for (;;) {
        flush_due(a2b);
        flush_due(b2a);
        int64_t next = INT64_MAX;
        for (int i = 0; i < 2; i++)
            if (dirs[i]->nheap > 0 && dirs[i]->due[dirs[i]->heap[0]] < next) next = dirs[i]->due[dirs[i]->heap[0]];
        struct timespec ts, *tsp = NULL;
        if (next != INT64_MAX) {
            int64_t wait = next - now_ns() - spin_ns;
            if (wait < 0) wait = 0;
            ts.tv_sec = wait / 1000000000LL;
            ts.tv_nsec = wait % 1000000000LL;
            tsp = &ts;
        }
        int rc = ppoll(pfd, 3, tsp, NULL);
        if (rc < 0 && errno != EINTR) return 1;
        if (rc <= 0) continue;
        if (pfd[0].revents & POLLIN) drain(a2b);
        if (pfd[1].revents & POLLIN) drain(b2a);
        if (pfd[2].revents & (POLLIN | POLLHUP | POLLERR)) {
            if (!read_commands(dirs)) return 0;
        }
        if ((pfd[0].revents | pfd[1].revents) & (POLLERR | POLLNVAL)) return 1;
    }
}
