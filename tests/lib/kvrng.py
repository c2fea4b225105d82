"""core/rng.c restated in Python, for tests that recompute what a seeded C stream drew: rng_init's
splitmix64 folding of (seed, a, b, c), xoshiro256**, rng_below (unbiased, by rejection) and
rng_normal (Box-Muller with a spare)."""
import math

M64 = (1 << 64) - 1


class Rng:
    """core/rng.c: splitmix64 folding (seed, a, b, c), xoshiro256**, Box-Muller with a spare."""

    def __init__(self, seed, a, b, c):
        x = [seed & M64]
        for t in (a, b, c):
            x = [self._sm(x) ^ t]
        self.s = [self._sm(x) for _ in range(4)]
        self.spare = None

    @staticmethod
    def _sm(x):
        x[0] = (x[0] + 0x9E3779B97F4A7C15) & M64
        z = x[0]
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def u64(self):
        s = self.s
        rotl = lambda v, k: ((v << k) | (v >> (64 - k))) & M64  # noqa: E731
        out = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return out

    def normal(self):
        if self.spare is not None:
            v, self.spare = self.spare, None
            return v
        u1, u2 = (self.u64() >> 11) * 2.0 ** -53, (self.u64() >> 11) * 2.0 ** -53
        rad, ang = math.sqrt(-2.0 * math.log(1.0 - u1)), 2.0 * math.pi * u2
        self.spare = rad * math.sin(ang)
        return rad * math.cos(ang)

    def below(self, n):
        """rng_below(n): uniform in [0, n), rejecting draws at or above the largest multiple of n."""
        limit = M64 - (M64 % n)
        while True:
            x = self.u64()
            if x < limit:
                return x % n
