"""A worker's snapshots on the server: the pipeline's snapshot
(:mod:`noc_assistant.stream.checkpoint`) in the object store ``noc-state`` under
``<durable>-<stream seq>``, and a manifest ``{object, seq, sha256}`` in the key-value bucket
``noc-state`` under the durable's name (put only once the object is whole)."""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import orjson
from nats.js.errors import (
    BucketNotFoundError,
    KeyNotFoundError,
    NoKeysError,
    NotFoundError,
    ObjectNotFoundError,
)

from knowledge.pack import Pack
from noc_assistant.stream.checkpoint import CheckpointError, restore, snapshot
from noc_assistant.stream.pipeline import FindingSink, IncidentSink, Pipeline

from .subjects import STATE_BUCKET

__all__ = ["Restored", "SnapshotStore", "forget", "manifests"]


@dataclass(frozen=True)
class Restored:
    """A pipeline restored from a snapshot, the stream sequence it covers, and its object."""

    pipeline: Pipeline
    seq: int
    name: str


class SnapshotStore:
    """One durable's snapshots (see the module docstring)."""

    def __init__(self, kv: Any, obs: Any, durable: str) -> None:
        self._kv = kv
        self._obs = obs
        self._durable = durable
        self._previous: str | None = None

    @classmethod
    async def open(cls, js: Any, durable: str) -> SnapshotStore:
        """The bucket and the object store (made if absent)."""
        kv = await js.create_key_value(bucket=STATE_BUCKET, history=1)
        obs = await js.create_object_store(STATE_BUCKET)
        return cls(kv, obs, durable)

    async def load(
        self,
        key: bytes,
        pack: Pack,
        on_finding: FindingSink | None,
        on_incident: IncidentSink | None,
    ) -> Restored | None:
        """The last snapshot, restored with ``pack`` and the sinks (None: there is none);
        :class:`CheckpointError` when the manifest or its object is not usable."""
        try:
            entry = await self._kv.get(self._durable)
        except KeyNotFoundError:
            return None
        source = f"nats kv {STATE_BUCKET}/{self._durable}"
        try:
            manifest = json.loads(entry.value)
            name, seq, digest = manifest["object"], int(manifest["seq"]), manifest["sha256"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"manifest is not usable: {exc}", source=source) from None
        try:
            blob = (await self._obs.get(name)).data
        except ObjectNotFoundError:
            raise CheckpointError(f"snapshot object {name!r} is missing", source=source) from None
        if hashlib.sha256(blob).hexdigest() != digest:
            raise CheckpointError(f"snapshot object {name!r} does not match", source=source)
        pipe, _meta = restore(
            blob,
            key,
            pack=pack,
            on_finding=on_finding,
            on_incident=on_incident,
            source=f"nats object {STATE_BUCKET}/{name}",
        )
        self._previous = name
        return Restored(pipe, seq, name)

    async def save(self, pipe: Pipeline, key: bytes, stream: str, seq: int) -> None:
        """Snapshot ``pipe`` as covering ``stream`` up to ``seq``: the object, then the
        manifest, then the previous object goes."""
        blob = snapshot(pipe, key, {"stream": stream, "seq": seq})
        name = f"{self._durable}-{seq}"
        await self._obs.put(name, blob)
        manifest = {"object": name, "seq": seq, "sha256": hashlib.sha256(blob).hexdigest()}
        await self._kv.put(self._durable, orjson.dumps(manifest))
        if self._previous is not None and self._previous != name:
            with contextlib.suppress(ObjectNotFoundError):
                await self._obs.delete(self._previous)
        self._previous = name


async def manifests(js: Any) -> dict[str, int]:
    """The stream sequence each durable's last snapshot covers (none: no bucket yet)."""
    out: dict[str, int] = {}
    try:
        kv = await js.key_value(STATE_BUCKET)
        for name in await kv.keys():
            with contextlib.suppress(KeyNotFoundError, ValueError, KeyError, TypeError):
                out[name] = int(json.loads((await kv.get(name)).value)["seq"])
    except (BucketNotFoundError, NotFoundError, NoKeysError):  # none, or empty
        pass
    return out


async def forget(js: Any, durable: str) -> None:
    """Delete a durable's manifest and its snapshot object (there may be neither)."""
    try:
        kv = await js.key_value(STATE_BUCKET)
        entry = await kv.get(durable)
    except (BucketNotFoundError, KeyNotFoundError):
        return
    await kv.purge(durable)
    with contextlib.suppress(ObjectNotFoundError, KeyError, ValueError):
        obs = await js.object_store(STATE_BUCKET)
        await obs.delete(json.loads(entry.value)["object"])
