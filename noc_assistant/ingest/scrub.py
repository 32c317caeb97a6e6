"""Subscriber identifiers out of label values, where telemetry enters the pipeline.

An entity name or a label value is text an exporter (or an attacker who controls one) wrote:
``instance="gpu-srv-1 imsi-001010123456789"`` would otherwise travel into incident titles,
evidence ids, reports, prompts and partner e-mails. Masking it once at the door, with the
pack's masker, keeps every later use consistent: the series, its findings, its incident and its
evidence all carry the masked form, and nothing downstream has to remember to mask a name.

A label value is a name, not prose: beyond the masker's recognisers (which need a label or
a known form to tell an identifier from a number), any run of 14 or more digits in one, bare or
split by single spaces, dashes or dots (``460 997 95720 3058``, ``35-281230-162702-4``), is
masked too — no NF, cell or PLMN name holds one, an IMSI, IMEI or MSISDN does.

Label sets repeat for every sample of a series, so each distinct one is masked once and
remembered (a bounded cache per pack); a point whose labels hold no identifier is returned
unchanged, the same object.

>>> from knowledge.pack import load_pack
>>> from noc_assistant.ingest.point import Point
>>> pack = load_pack()
>>> p = Point(60.0, "up", (("instance", "gpu-srv-1 imsi-001010123456789"),), 1.0)
>>> scrub_point(pack, p).labels
(('instance', 'gpu-srv-1 imsi-00101<masked>'),)
>>> q = Point(60.0, "up", (("instance", "amf-1"), ("plmnid", "26201")), 1.0)
>>> scrub_point(pack, q) is q
True
>>> scrub_labels(pack, (("instance", "amf-01 35-281230-162702-4"),))
(('instance', 'amf-01 <masked>'),)
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from functools import partial

from guardrails.masking import Masker
from knowledge.pack import Pack
from noc_assistant.ingest.point import Point

__all__ = ["label_scrubber", "scrub_labels", "scrub_point"]

_Labels = tuple[tuple[str, str], ...]
_MAX_CACHED = 200_000
_LONG_NUMBER = re.compile(r"(?<![0-9A-Za-z_-])[0-9](?:[ .-]?[0-9]){13,}(?![0-9])")


_CLEAN: _Labels = tuple([("\x00", "clean")])
"""What the cache holds for labels with nothing to mask: the caller's own tuple is returned
(labels equal to a cached tuple are often another object: no copy of the point is made)."""


class _Cache:
    def __init__(self, pack: Pack) -> None:
        self.masker = Masker.from_pack(pack)
        self.seen: dict[_Labels, _Labels] = {}
        #: each label value masked once: values repeat across series (an entity's name is in
        #: every series of it), and masking one is a function of the value alone
        self.values: dict[str, str] = {}


_CACHES: dict[int, tuple[weakref.ref[Pack], _Cache]] = {}
"""Per pack (by identity; a pack is an unhashable dataclass), its masker and label cache."""


def _cache(pack: Pack) -> _Cache:
    key = id(pack)
    entry = _CACHES.get(key)
    if entry is None or entry[0]() is not pack:

        def forget(_: weakref.ref[Pack]) -> None:
            _CACHES.pop(key, None)

        entry = (weakref.ref(pack, forget), _Cache(pack))
        _CACHES[key] = entry
    return entry[1]


def scrub_labels(pack: Pack, labels: _Labels) -> _Labels:
    """``labels`` with subscriber identifiers masked in every value (the same tuple when
    there were none)."""
    return _lookup(_cache(pack), labels)


def label_scrubber(pack: Pack) -> Callable[[_Labels], _Labels]:
    """:func:`scrub_labels` of ``pack`` as one function (for a loop over many points: the
    pack's cache is looked up once)."""
    return partial(_lookup, _cache(pack))


def _lookup(cache: _Cache, labels: _Labels) -> _Labels:
    hit = cache.seen.get(labels)
    if hit is None:
        hit = _scrub(cache, labels)
    return labels if hit is _CLEAN else hit


def _scrub(cache: _Cache, labels: _Labels) -> _Labels:
    masked = tuple((k, _value(cache, v)) for k, v in labels)
    hit = _CLEAN if masked == labels else masked
    if len(cache.seen) >= _MAX_CACHED:
        cache.seen.clear()
    cache.seen[labels] = hit
    return hit


def _value(cache: _Cache, value: str) -> str:
    done = cache.values.get(value)
    if done is None:
        done = _LONG_NUMBER.sub("<masked>", cache.masker.mask(value).text)
        if len(cache.values) >= _MAX_CACHED:
            cache.values.clear()
        cache.values[value] = done
    return done


def scrub_point(pack: Pack, point: Point) -> Point:
    """``point`` with its label values scrubbed (the same point when nothing was masked)."""
    labels = scrub_labels(pack, point.labels)
    return point if labels is point.labels else point._replace(labels=labels)
