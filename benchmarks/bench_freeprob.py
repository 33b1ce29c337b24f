"""Free moments of every canonical word up to length 8 over 3 laws and up to length 10 over 2 (the planar
recursion of ``symbolic.freeprob``): wall time on this machine, printed (the test counts the work instead)."""
from __future__ import annotations

import time
from fractions import Fraction as R

from symattn.symbolic.freeprob import GOE, Wishart, canonical_words, clear_cache, free_moments


def main():
    for laws, M in (([Wishart(1, 1), Wishart(R(1, 2), 1), GOE(R(1, 2))], 8), ([Wishart(1, 1), Wishart(R(1, 2), 1)], 10)):
        clear_cache()
        words = canonical_words(laws, M)
        t0 = time.perf_counter()
        free_moments(words, laws)
        print(f"{len(laws)} laws, words up to length {M}: {len(words)} words in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
