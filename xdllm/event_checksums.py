"""The CRC-32C of every TensorBoard event record, computed in C (``google-crc32c``).

Without TensorFlow, tensorboard checksums each record it writes (and reads) with a pure-Python
loop over its bytes: 13 ms for a 150 kB picture of the denoising views, on the writer's thread
but holding the GIL, so drawing the views waits for it. :func:`use_fast_event_checksums` points
tensorboard's record writer and reader at :func:`masked_crc32c`, the same values (tested) about
a thousand times faster. Where ``google-crc32c`` has no compiled extension (a machine that
installed xdllm without its dependencies), tensorboard's own loop stays.
"""

from __future__ import annotations

try:
    import google_crc32c
except ImportError:  # installed with --no-deps: tensorboard's loop stays, slower and correct
    google_crc32c = None

MASK_DELTA = 0xA282EAD8
"""What TFRecord adds to the rotated CRC (its "masked" checksum)."""


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C of ``data``: the CRC rotated right by 15 bits, plus
    :data:`MASK_DELTA`, modulo 2**32 (as ``tensorboard``'s ``masked_crc32c``)."""
    crc = google_crc32c.value(bytes(data))
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def fast_checksums_available() -> bool:
    """Whether ``google-crc32c`` is installed with its compiled extension."""
    return google_crc32c is not None and google_crc32c.implementation == "c"


def use_fast_event_checksums() -> None:
    """Make this process's tensorboard writers and readers checksum with :func:`masked_crc32c`
    (the writers look the function up at every record, so also writers open already)."""
    if not fast_checksums_available():
        return
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow
    from tensorboard.summary.writer import record_writer

    record_writer.masked_crc32c = masked_crc32c
    pywrap_tensorflow.masked_crc32c = masked_crc32c
