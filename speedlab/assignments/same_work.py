"""What a submission may not change: the model, the data and the number of samples seen.

Only how the data reaches the model may change (workers, pinned memory, persistent workers,
prefetching, preloading). The data is compared by its fingerprint
(``speedlab.measure.dataset``): the storage simulator, the images' size, mode and JPEG
quality, their bytes, and a few samples as the model gets them.
"""

from __future__ import annotations

from typing import Any

from speedlab.results.run import RunResult

#: Fingerprint fields, in the order they are compared, with what each one names.
DATA_FIELDS = {
    "storage": "the storage",
    "image_size": "the image size",
    "jpeg_quality": "the JPEG quality",
    "image_mode": "the image mode",
    "file_hash": "the image files",
    "sample": "each sample",
    "sample_hash": "the samples (as decoded and transformed)",
}


def changed(reference: RunResult, student: RunResult) -> str | None:
    """What the submission changed that the assignment forbids, in one sentence; None if nothing."""
    ref, got = reference.workload, student.workload
    if (ref.get("model"), ref.get("parameters")) != (got.get("model"), got.get("parameters")):
        return (
            f"the model changed ({got.get('model')} with {got.get('parameters')} parameters; "
            f"expected {ref.get('model')} with {ref.get('parameters')})"
        )
    data = _data_changed(ref.get("data") or {}, got.get("data") or {})
    if data:
        return data
    if ref.get("dataset_len") != got.get("dataset_len"):
        return f"the data changed ({got.get('dataset_len')} training samples; expected {ref.get('dataset_len')})"
    if student.samples != reference.samples:
        return (
            f"the number of samples seen changed ({student.samples}; expected {reference.samples})"
        )
    return None


def _data_changed(ref: dict[str, Any], got: dict[str, Any]) -> str | None:
    for key, name in DATA_FIELDS.items():
        if key in ref and got.get(key) != ref[key]:
            if key.endswith("_hash"):
                return f"the data changed: {name} differ from the assignment's"
            return f"the data changed: {name} is {got.get(key, 'unknown')}, the assignment's is {ref[key]}"
    return None
