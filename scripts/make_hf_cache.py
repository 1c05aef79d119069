"""Build an offline Hugging Face hub cache from the repository's tiny models, so spaces and
benchmarks can name them by hub id with no network (tests/hf_cache.py builds it):

    .venv/bin/python scripts/make_hf_cache.py --cache DIR
    HF_HUB_CACHE=DIR HF_HUB_OFFLINE=1 .venv/bin/spectune run SPACE.yaml

Ids: spectune/tiny-target, spectune/tiny-draft, spectune/tiny-eagle, spectune/tiny-eagle3,
spectune/tiny-target-mtp (models/tiny/target, draft, eagle, eagle3, target-mtp).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.hf_cache import TINY_IDS, build_hf_cache, repo_folder  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", required=True, type=Path, help="the cache folder (HF_HUB_CACHE)")
    args = ap.parse_args()
    cache = build_hf_cache(args.cache)
    for repo_id in TINY_IDS:
        print(f"{repo_id}: {repo_folder(cache, repo_id)}")
    print(f"use it with: HF_HUB_CACHE={cache.resolve()} HF_HUB_OFFLINE=1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
