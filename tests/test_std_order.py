"""The model of libstdc++'s unordered_map iteration order against the real thing."""
from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from pynnet3.std_order import iteration_order

_PROGRAM = r"""
#include <unordered_map>
#include <iostream>
int main() {
  int n;
  while (std::cin >> n) {
    std::unordered_map<int, int> m;
    for (int i = 0; i < n; i++) { int k; std::cin >> k; m[k]++; }
    for (auto &p : m) std::cout << p.first << " ";
    std::cout << "\n";
  }
}
"""


def test_pinned_orders() -> None:
    # Produced by the program above built with g++ 12 (the compiler Kaldi's
    # reference build used).
    assert iteration_order([5, 3], hash_fn=int) == [3, 5]
    assert iteration_order([4, 9, 2], hash_fn=int) == [2, 9, 4]
    assert iteration_order(list(range(1, 15)), hash_fn=int) == [14] + list(range(1, 14))


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_matches_libstdcxx(tmp_path: Path) -> None:
    src = tmp_path / "um.cc"
    src.write_text(_PROGRAM)
    exe = tmp_path / "um"
    subprocess.run(["g++", "-O1", "-o", str(exe), str(src)], check=True, capture_output=True)
    rng = random.Random(7)
    cases = [rng.sample(range(0, 5000), rng.randint(1, 300)) for _ in range(200)]
    text = "".join(f"{len(c)} " + " ".join(map(str, c)) + "\n" for c in cases)
    out = subprocess.run([str(exe)], input=text.encode(), capture_output=True, check=True)
    for keys, line in zip(cases, out.stdout.decode().splitlines()):
        assert iteration_order(keys, hash_fn=int) == [int(v) for v in line.split()]
