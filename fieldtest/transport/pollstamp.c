/* Wait for sockets with poll(2) and read CLOCK_MONOTONIC the moment it returns, for the kit's
 * MQTT transport's arrival stamps.
 *
 * A Python thread woken by a socket must get the GIL back before it can read the clock, and in
 * the twin robot the physics loop and the bag writer hold it for up to a few hundred microseconds:
 * that wait would count as link latency (the DDS transport stamps in C, ddsstamp.c). ctypes
 * releases the GIL for this whole call, so the stamp is taken before it is taken back.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <time.h>

/* poll(fds, nfds, timeout_ms); *woke_ns = CLOCK_MONOTONIC when it returned. Returns poll's count,
 * or -errno. */
int ft_poll_stamped(struct pollfd *fds, int nfds, int timeout_ms, int64_t *woke_ns) {
  int rc = poll(fds, (nfds_t)nfds, timeout_ms);
  int err = errno;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  *woke_ns = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
  return rc < 0 ? -err : rc;
}
