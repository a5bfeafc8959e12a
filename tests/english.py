"""What counts as English left in a Chinese page: the checks of the translation tests (tests/jobs/test_reasons.py,
tests/e2e/test_chinese_browser.py). Product and technical names stay as they are in Chinese text (GPU, Pod, Kueue,
MiB, UTC ...); so does data (team, pool, job and node names, images), which a test passes as `data`."""

import re

# Terms a Chinese GPU-cluster user reads in Latin letters.
KEPT_TERMS = {
    "GPU",
    "GPUs",
    "CPU",
    "Pod",
    "Pods",
    "Kueue",
    "Kubernetes",
    "Job",
    "batch",
    "DCGM",
    "MiB",
    "GiB",
    "UTC",
    "ID",
    "API",
    "CSV",
    "JSON",
    "YAML",
    "Reservoir",
    "Webhook",
    "NVIDIA",
    "UID",
    "UUID",
    "ISO",
    "NotReady",
    "Ready",
    "Pending",
    "flavor",
    "ClusterQueue",
    "Workload",
    "key",
    "value",
    "NoSchedule",
    "NUL",
    "CI",
    "htmx",
    "Swagger",
    "OpenAPI",
    "English",
    "kind",
    "v1",
    "of",
}
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*")


def english_words(text: str, data: tuple[str, ...] = ()) -> list[str]:
    """Latin-letter words of `text` that are neither kept terms nor part of `data`."""
    for item in sorted(data, key=len, reverse=True):
        text = text.replace(item, " ")
    return [word for word in _WORD.findall(text) if word not in KEPT_TERMS and len(word) > 1]


_PLAIN_WORD = re.compile(r"^\(?([A-Za-z][a-z'’]*)[,.:;)]*$")


def english_phrases(text: str, data: tuple[str, ...] = (), length: int = 3) -> list[str]:
    """Stretches of `length` or more plain English words (a sentence or phrase left untranslated): the text is cut
    at every character that is neither a Latin letter nor a space or light punctuation, e.g. a Chinese one. Code
    and data (registry.example.com, python train.py --epochs, key=value) are not plain words."""
    for item in sorted(data, key=len, reverse=True):
        text = text.replace(item, "|")
    stretches = re.split(r"[^A-Za-z0-9'’\-\s,.:;()/=_*]+", text)
    found = []
    for stretch in stretches:
        plain = [m[1] for m in map(_PLAIN_WORD.match, stretch.split()) if m and m[1] not in KEPT_TERMS]
        if len(plain) >= length:
            found.append(stretch.strip())
    return found
