"""TESTS ONLY: writes the environment variables an engine was started with to
``--dump-env PATH`` (JSON), then becomes the FAKE OpenAI server (tests/fake_openai_server.py)
with the remaining arguments. It measures nothing."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

FAKE_SERVER = Path(__file__).resolve().parents[1] / "fake_openai_server.py"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump-env", required=True)
    args, rest = ap.parse_known_args(sys.argv[1:])
    Path(args.dump_env).write_text(json.dumps(dict(os.environ)))
    os.execv(sys.executable, [sys.executable, str(FAKE_SERVER), *rest])


if __name__ == "__main__":
    main()
