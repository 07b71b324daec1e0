/*
 * seed.cuh
 *	  Initial centroids on the device: random rows (random.cu), and greedy
 *	  k-means++ run as a queue of "units" the host only launches
 *	  (kmeanspp.cu, with its arithmetic shared with the C reference in
 *	  seed_pp.h).
 */
#ifndef KMG_SEED_CUH
#define KMG_SEED_CUH

#include "kmg_common.cuh"

/* ---- kmeanspp.cu ---- */

/* k-means++ candidates per step: 2 + ln k < 24 for any int k. */
#define KMG_PP_LMAX 24

/*
 * k-means++: a step is one launch of the "unit" kernel, which reads the
 * state the previous unit left, does one pass over the rows and, in its
 * last block, decides the next state.  The host only queues units (captured
 * in graphs) and reads this header between batches.
 */
typedef struct kmg_pp_head
{
	int			s;				/* centroid being chosen; >= k: done */
	int			phase;			/* KMG_PP_SELECT or KMG_PP_EVAL */
	int			units;			/* units that did work */
	int			selects;		/* SELECT units past the first (threshold misses) */
	int			filtered;		/* units that ran the int8 filter */
	int			dense;			/* units that ran every distance */
	unsigned int pairs_lo;		/* exact distances of the filtered units (low word) */
	/* potential of the current D2 (seed_pp.h's sum of w D2, as kmg_pp_value); 0 before it is known */
	double		phi;
} kmg_pp_head;

enum
{
	KMG_PP_SELECT = 0,			/* draw the candidates of step s from scratch */
	KMG_PP_EVAL = 1				/* evaluate the candidates of step s */
};

/* Widest int8 shadow row (bytes) the filter takes; wider rows run dense. */
#define KMG_PP_QMAX 256

typedef struct kmg_seed_bufs
{
	uint64_t   *hashes;			/* n */
	float	   *d2;				/* n: D2 of each row */
	signed char *q8;			/* n x dq: the int8 shadow (filter), or NULL */
	int		   *qn;				/* n: |q|^2 */
	float	   *qr;				/* n: bound on the quantisation error of the row */
	double	   *lkey;			/* L x KMG_PP_CAP keys of the next step, per candidate */
	int		   *lrow;
	void	   *part;			/* per-block selections (SELECT units) */
	void	   *state;			/* kmg_pp_state (its head first) */
	void	   *acc;			/* kmg_pp_acc: what the blocks of a unit add up */
	int			nblocks;		/* capacity of part */
	int			grid;			/* blocks of a unit (kmg_pp_prepare) */
	int			lb;				/* candidate tile of the unit kernel */
	size_t		smem;
	int			dq;				/* shadow row bytes; 0: no filter */
	int			L;
	size_t		qwindow;		/* bytes of q8 the units read as streaming (kmg_pp_prepare) */
} kmg_seed_bufs;

size_t		kmg_pp_fixed_bytes(int nblocks, int L);
int			kmg_pp_dq(int dp);
void		kmg_pp_carve(kmg_seed_bufs *sb, char *base, int nblocks, int L);
cudaError_t kmg_pp_prepare(kmg_seed_bufs *sb, int64_t n, int dp, const kmg_device *dev);
cudaError_t kmg_pp_begin(const kmg_args *a, const kmg_seed_bufs *sb, uint64_t seed, int run,
						 int shift, cudaStream_t stream);
cudaError_t kmg_pp_units(const kmg_args *a, const kmg_seed_bufs *sb, int count,
						 cudaStream_t stream);

/* ---- random.cu ---- */
cudaError_t kmg_seed_random_keys(const kmg_args *a, const uint64_t *hashes, uint64_t stream_key,
								 double *keys, cudaStream_t stream);
cudaError_t kmg_take_rows(const kmg_args *a, const int32_t *rows, int count, int c0,
						  cudaStream_t stream);

#endif							/* KMG_SEED_CUH */
