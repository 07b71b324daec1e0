/*
 * km_half.h
 *	  Rows kept in two bytes a value: float16 (IEEE binary16) and bfloat16.
 *
 * With storage 'float16' or 'bfloat16' every value of a row is rounded to
 * the nearest value of that format, ties to even, as the row is read
 * (vector_input.c), and from then on the fit clusters the rounded values:
 * the CPU engine sees float32 values that happen to be representable, the
 * GPU engine stores them in two bytes, and both compute the same model.
 * This header is the one home of that rounding, plain C on integers only
 * (no dependence on the floating-point environment), built by every
 * compiler of the project (KM_HD), so that the SQL layer, the engines and
 * the kernels' references round alike.
 *
 * float16: 1 sign, 5 exponent, 10 fraction bits.  The largest finite value
 * is 65504; from 65520 (half-way to 65536, which ties to the even infinity)
 * a value rounds to infinity, which storage float16 refuses.  Subnormals
 * (down to 2^-24) are kept; they, like every float16, are exact in float32.
 * bfloat16: the upper half of a float32 (8 exponent bits, 7 fraction
 * bits): the range of float32, a value overflows only from 0x7f7f8000
 * (about 3.3961e38) up.
 */
#ifndef KM_HALF_H
#define KM_HALF_H

#include <stdint.h>
#include <string.h>

#include "km_hd.h"

/* The float16 bits nearest to x (finite), ties to even; 0x7c00|sign on overflow. */
KM_HD uint16_t
km_f16_bits(float x)
{
	uint32_t	f;
	uint32_t	sign;
	uint32_t	a;

	memcpy(&f, &x, sizeof(f));
	sign = (f >> 16) & 0x8000u;
	a = f & 0x7fffffffu;
	if (a >= 0x47800000u)		/* 2^16 and up: beyond rounding */
		return (uint16_t) (sign | 0x7c00u);
	if (a >= 0x38800000u)		/* 2^-14 and up: a normal float16 (or 65536) */
	{
		/* drop 13 fraction bits, ties to even; a carry may reach the infinity */
		a += 0xfffu + ((a >> 13) & 1u);
		return (uint16_t) (sign | ((a - 0x38000000u) >> 13));
	}
	else
	{
		/* a subnormal float16: the value in units of 2^-24, ties to even */
		uint32_t	e = a >> 23;
		uint32_t	m = (a & 0x7fffffu) | 0x800000u;
		uint32_t	shift = 126u - e;	/* value = m * 2^(e - 150) = (m >> shift) units */
		uint32_t	q,
					r,
					half;

		if (e == 0 || shift > 24)
			return (uint16_t) sign; /* below half the smallest subnormal */
		q = m >> shift;
		r = m & ((1u << shift) - 1u);
		half = 1u << (shift - 1u);
		if (r > half || (r == half && (q & 1u)))
			q++;
		return (uint16_t) (sign | q);
	}
}

/* The float32 holding the float16 h exactly. */
KM_HD float
km_f16_value(uint16_t h)
{
	uint32_t	sign = (uint32_t) (h & 0x8000u) << 16;
	uint32_t	e = (h >> 10) & 0x1fu;
	uint32_t	m = h & 0x3ffu;
	uint32_t	f;
	float		x;

	if (e == 0x1fu)
		f = sign | 0x7f800000u | (m << 13);
	else if (e != 0)
		f = sign | ((e + 112u) << 23) | (m << 13);
	else if (m == 0)
		f = sign;
	else
	{
		/* subnormal: normalise the fraction into a float32 */
		e = 113u;
		while ((m & 0x400u) == 0)
		{
			m <<= 1;
			e--;
		}
		f = sign | (e << 23) | ((m & 0x3ffu) << 13);
	}
	memcpy(&x, &f, sizeof(x));
	return x;
}

/* The bfloat16 bits nearest to x (finite), ties to even; 0x7f80|sign on overflow. */
KM_HD uint16_t
km_bf16_bits(float x)
{
	uint32_t	f;

	memcpy(&f, &x, sizeof(f));
	f += 0x7fffu + ((f >> 16) & 1u);	/* a carry into the exponent is right */
	return (uint16_t) (f >> 16);
}

/* The float32 holding the bfloat16 h exactly. */
KM_HD float
km_bf16_value(uint16_t h)
{
	uint32_t	f = (uint32_t) h << 16;
	float		x;

	memcpy(&x, &f, sizeof(x));
	return x;
}

/*
 * x rounded to float16 (returned as the float32 that holds it), ties to
 * even; *overflow set when it rounds to infinity (|x| >= 65520).
 */
KM_HD float
km_f16_round(float x, int *overflow)
{
	uint16_t	h = km_f16_bits(x);

	*overflow = (h & 0x7fffu) == 0x7c00u;
	return km_f16_value(h);
}

/* x rounded to bfloat16, ties to even; *overflow set when it rounds to infinity. */
KM_HD float
km_bf16_round(float x, int *overflow)
{
	uint16_t	h = km_bf16_bits(x);

	*overflow = (h & 0x7fffu) == 0x7f80u;
	return km_bf16_value(h);
}

#endif							/* KM_HALF_H */
