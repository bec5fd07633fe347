#include "core/event.h"

#include <sched.h>

/* About 10-20 us of polling before yielding, then sleeping. */
#define DSP_EVENT_SPINS 4096
#define DSP_EVENT_YIELDS 64

void dsp_event_init(dsp_event *e) {
  atomic_init(&e->seq, 0u);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
}

void dsp_event_destroy(dsp_event *e) {
  pthread_cond_destroy(&e->cv);
  pthread_mutex_destroy(&e->mu);
}

unsigned dsp_event_seq(dsp_event *e) { return atomic_load(&e->seq); }

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static inline int done(dsp_event *e, unsigned seen, atomic_int *stop) {
  return atomic_load(&e->seq) != seen || (stop && atomic_load(stop));
}

void dsp_event_wait_or(dsp_event *e, unsigned seen, atomic_int *stop) {
  for (int i = 0; i < DSP_EVENT_SPINS; i++) {
    if (done(e, seen, stop)) return;
    cpu_relax();
  }
  for (int i = 0; i < DSP_EVENT_YIELDS; i++) {
    if (done(e, seen, stop)) return;
    sched_yield();
  }
  /* the bump changes seq (and a stop is set) before it takes the lock, so a
   * waiter that saw neither under the lock is already waiting when the
   * broadcast comes */
  pthread_mutex_lock(&e->mu);
  while (!done(e, seen, stop)) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
}

void dsp_event_wait(dsp_event *e, unsigned seen) { dsp_event_wait_or(e, seen, NULL); }

void dsp_event_bump(dsp_event *e) {
  atomic_fetch_add(&e->seq, 1u);
  pthread_mutex_lock(&e->mu);
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

void dsp_barrier_init(dsp_barrier *b, int n) {
  b->n = n;
  atomic_init(&b->arrived, 0);
  dsp_event_init(&b->ev);
}

void dsp_barrier_destroy(dsp_barrier *b) { dsp_event_destroy(&b->ev); }

void dsp_barrier_wait_or(dsp_barrier *b, atomic_int *stop) {
  const unsigned seen = dsp_event_seq(&b->ev);
  if (atomic_fetch_add(&b->arrived, 1) == b->n - 1) {
    atomic_store(&b->arrived, 0); /* before the bump: nobody arrives for the next round until then */
    dsp_event_bump(&b->ev);
    return;
  }
  dsp_event_wait_or(&b->ev, seen, stop);
}
