"""The HPO-benchmark protocol for SpecTune's search (bench/search_efficiency.py): noisy
replay of recorded repeats, recommendation scoring, paired statistics. Benchmark code only."""
