"""Entry point of a :class:`~hf_meds_cliff.rewards.MathVerifyPool` worker process.

Started as ``python -m hf_meds_cliff.rewards._verify_worker`` with pipes on stdin/stdout. Replies go
to a private copy of the original stdout; file descriptor 1 is pointed at stderr, so anything a
library prints cannot corrupt the line protocol.
"""

import os
import sys

from hf_meds_cliff.rewards.verifier import serve_verification_requests

if __name__ == "__main__":
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve_verification_requests(sys.stdin.buffer, replies)
