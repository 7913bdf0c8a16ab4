"""``python -m tests.support.print_s3_options``: the Beam S3 options this process's code outside
a pipeline uses (labse_common.remote), as one JSON line, for tests/labse_common/test_forked_main.py."""

from __future__ import annotations

import json

if __name__ == "__main__":
    from labse_common.remote import _s3_options

    print(json.dumps({k: v for k, v in _s3_options().items() if v is not None}, sort_keys=True))
