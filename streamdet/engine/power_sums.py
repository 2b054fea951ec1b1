"""A small set of document numbers recovered from its power sums (SPEC §8's exact pop(d)).

A common gram (more than m documents once) keeps no holder list, yet when withdrawals
bring its count below P the holders left lose a popular gram, so they must be known. A
count and the power sums s_i = Σ d^i (i = 1 .. P-1) of the holders' docnos, modulo the
prime 2^61 - 1, are updated by every add and withdrawal in O(P) and say exactly which
n <= P-1 holders are left: by Newton's identities the sums give the elementary symmetric
polynomials of the holders, i.e. the polynomial whose roots they are, and its roots are
found over the prime field by Cantor-Zassenhaus splitting (distinct roots, degree < P).
Docnos must be below the prime (2.3e18) to be told apart, which they are by far.

The cost (a few polynomial powers of degree < P) is paid only when a gram's count
crosses P, which a common gram does only after withdrawals took ~m - P of its holders.
"""

from __future__ import annotations

import random

PRIME = (1 << 61) - 1
_SEED = 0x5EED  # splitting is randomised; a fixed seed keeps every run alike

Poly = list[int]  # coefficients, lowest degree first


def add_to(sums: list[int], docno: int, sign: int = 1) -> None:
    """Add (sign 1) or remove (sign -1) `docno` from power sums s_1 .. s_len(sums)."""
    if docno >= PRIME:
        raise ValueError(f"docno {docno} is not below 2^61 - 1")
    x, p = docno, 1
    for i in range(len(sums)):
        p = p * x % PRIME
        sums[i] = (sums[i] + sign * p) % PRIME


def sums_of(docnos: list[int] | tuple[int, ...], width: int) -> list[int]:
    """The power sums s_1 .. s_width of a set of docnos."""
    sums = [0] * width
    for d in docnos:
        add_to(sums, d)
    return sums


def recover(sums: list[int], n: int) -> list[int]:
    """The n docnos (ascending) whose power sums are `sums` (n <= len(sums))."""
    if n == 0:
        return []
    if n > len(sums):
        raise ValueError(f"{len(sums)} power sums cannot tell {n} documents apart")
    roots = _roots(_monic(_elementary(sums, n)), random.Random(_SEED))
    if len(roots) != n or 0 in roots:  # docnos start at 1: a root 0 is a miscount
        raise ValueError("power sums that belong to no set of documents")
    return sorted(roots)


def _elementary(sums: list[int], n: int) -> list[int]:
    """e_0 .. e_n from the power sums by Newton's identities:
    k e_k = Σ_{i=1..k} (-1)^(i-1) e_{k-i} s_i."""
    e = [1]
    for k in range(1, n + 1):
        acc = 0
        for i in range(1, k + 1):
            term = e[k - i] * sums[i - 1]
            acc += term if i % 2 else -term
        e.append(acc % PRIME * pow(k, PRIME - 2, PRIME) % PRIME)
    return e


def _monic(e: list[int]) -> Poly:
    """Π (x - r) = x^n - e_1 x^(n-1) + e_2 x^(n-2) - ..., lowest degree first."""
    n = len(e) - 1
    return [e[n - j] if (n - j) % 2 == 0 else -e[n - j] % PRIME for j in range(n)] + [1]


def _trim(a: Poly) -> Poly:
    while len(a) > 1 and a[-1] == 0:
        a.pop()
    return a


def _rem(a: Poly, m: Poly) -> Poly:
    """a mod m (m monic)."""
    a = a[:]
    dm = len(m) - 1
    while len(a) - 1 >= dm:
        f = a[-1]
        if f:
            shift = len(a) - 1 - dm
            for i, c in enumerate(m):
                a[shift + i] = (a[shift + i] - f * c) % PRIME
        a.pop()
    return _trim(a) if a else [0]


def _div(a: Poly, m: Poly) -> Poly:
    """a / m for m monic dividing a."""
    a = a[:]
    dm = len(m) - 1
    q = [0] * (len(a) - dm)
    while len(a) - 1 >= dm:
        f = a[-1]
        shift = len(a) - 1 - dm
        q[shift] = f
        for i, c in enumerate(m):
            a[shift + i] = (a[shift + i] - f * c) % PRIME
        a.pop()
    return q


def _mul_mod(a: Poly, b: Poly, m: Poly) -> Poly:
    out = [0] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        if x:
            for j, y in enumerate(b):
                out[i + j] = (out[i + j] + x * y) % PRIME
    return _rem(out, m)


def _pow_mod(base: Poly, e: int, m: Poly) -> Poly:
    out, b = [1], _rem(base, m)
    while e:
        if e & 1:
            out = _mul_mod(out, b, m)
        b = _mul_mod(b, b, m)
        e >>= 1
    return out


def _make_monic(a: Poly) -> Poly:
    lead = pow(a[-1], PRIME - 2, PRIME)
    return [c * lead % PRIME for c in a]


def _gcd(a: Poly, b: Poly) -> Poly:
    while b != [0]:
        a, b = b, _rem(a, _make_monic(b))
    return _make_monic(a)


def _roots(f: Poly, rng: random.Random) -> list[int]:
    """The roots of a monic polynomial with distinct roots that splits over the field:
    gcd(f, (x + a)^((p-1)/2) - 1) is a proper factor for half of all a."""
    n = len(f) - 1
    if n == 0:
        return []
    if n == 1:
        return [-f[0] % PRIME]
    for _ in range(200):
        g = _pow_mod([rng.randrange(PRIME), 1], (PRIME - 1) // 2, f)
        g[0] = (g[0] - 1) % PRIME
        d = _gcd(f, _trim(g))
        if 0 < len(d) - 1 < n:
            return _roots(d, rng) + _roots(_div(f, d), rng)
    return []  # not a product of distinct linear factors: no such set
