"""Entry point of a :class:`~hf_meds_cliff.rewards.MathVerifyPool` worker process.

Started as ``python -m hf_meds_cliff.rewards._verify_worker`` with pipes on stdin/stdout.
"""

import sys

from hf_meds_cliff.rewards.verifier import serve_verification_requests

if __name__ == "__main__":
    serve_verification_requests(sys.stdin.buffer, sys.stdout.buffer)
