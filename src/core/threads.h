/* How many CPU threads this process uses: DSPARK_THREADS when set, else the
 * host's cores shared equally among the MPI ranks on it (Open MPI tells us
 * how many), at least one. Oversubscribed ranks with full thread teams would
 * spin against each other. */
#ifndef DSP_CORE_THREADS_H
#define DSP_CORE_THREADS_H

#ifdef __cplusplus
extern "C" {
#endif

int dsp_threads_default(void);
/* omp_set_num_threads(dsp_threads_default()). */
void dsp_threads_setup(void);

#ifdef __cplusplus
}
#endif
#endif
