/* A wake-up word shared by threads of one process: waiters spin a while on
 * the sequence number (hand-overs between busy threads are microseconds),
 * then sleep on a condition variable (so an oversubscribed host does not burn
 * the cores its other threads need). */
#ifndef DSP_CORE_EVENT_H
#define DSP_CORE_EVENT_H
#include <pthread.h>
#include <stdatomic.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  atomic_uint seq;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} dsp_event;

void dsp_event_init(dsp_event *e);
void dsp_event_destroy(dsp_event *e);
/* The current sequence number: read it before the condition a wait is for. */
unsigned dsp_event_seq(dsp_event *e);
/* Returns once the sequence number differs from `seen`. */
void dsp_event_wait(dsp_event *e, unsigned seen);
/* The same, or once *stop is non-zero (stop may be NULL); whoever sets *stop bumps e after. */
void dsp_event_wait_or(dsp_event *e, unsigned seen, atomic_int *stop);
/* Advances the sequence number and wakes every waiter. */
void dsp_event_bump(dsp_event *e);

/* A reusable barrier of n threads built on an event. */
typedef struct {
  int n;
  atomic_int arrived;
  dsp_event ev;
} dsp_barrier;

void dsp_barrier_init(dsp_barrier *b, int n);
void dsp_barrier_destroy(dsp_barrier *b);
/* Returns when all n have arrived, or as soon as *stop is non-zero (stop may
 * be NULL; after a stop the count is void until arrived is reset). */
void dsp_barrier_wait_or(dsp_barrier *b, atomic_int *stop);

#ifdef __cplusplus
}
#endif
#endif
