"""A Lambda package's size as SAM makes it: the file zipped alone, as `bootstrap`, with deflate
(Python's `zipfile`, `ZIP_DEFLATED`). Used by the cold-start benchmark (tests/tests/cold_start.rs)
and by infra/lambda-figures.sh, so both measure the package the same way.

    python3 infra/zipped_size.py FILE...     prints each file's zipped size in bytes, a line each
"""

import io
import sys
import zipfile


def zipped_size(path):
    """The size in bytes of `path` zipped alone as `bootstrap`, with deflate."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(path, "bootstrap")
    return len(buffer.getvalue())


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(zipped_size(p))
