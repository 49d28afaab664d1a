"""A WebSocket client of kube-pulse with permessage-deflate, as Python's
`websockets` library negotiates it by default: tests/gateway/compression.rs
drives it.

    compressed_ws.py URL mirror   subscribes to every cluster and app topic,
                                  rebuilds the documents from the messages and
                                  prints them as one JSON line for each line
                                  read from stdin
    compressed_ws.py URL bomb     sends an operation that inflates past the
                                  gateway's 64 KiB limit and prints the close

Each run first prints the extensions the handshake agreed on.
"""

import asyncio
import json
import sys

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed


def merge(doc, patch):
    """RFC 7386 merge patch."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(doc, dict):
        doc = {}
    for key, value in patch.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = merge(doc.get(key), value)
    return doc


def say(value):
    print(json.dumps(value), flush=True)


async def mirror(ws):
    # Padded with repeated topics so the operation itself is long enough
    # for the client to compress it.
    topics = ["clusters/**", "apps/**"] + ["apps/**"] * 40
    await ws.send(json.dumps({"op": "subscribe", "id": "all", "topics": topics}))
    docs = {}
    synced = False

    async def read():
        nonlocal synced
        async for text in ws:
            message = json.loads(text)
            kind = message.get("type")
            topic = message.get("topic")
            if kind == "snapshot":
                docs[topic] = (message["rev"], message["doc"])
            elif kind == "patch":
                rev, doc = docs[topic]
                if message["rev"] > rev:
                    assert message.get("base", message["rev"] - 1) == rev, message
                    docs[topic] = (message["rev"], merge(doc, message["patch"]))
            elif kind == "removed":
                docs.pop(topic, None)
            elif kind == "synced":
                synced = True
            elif kind == "error":
                say({"error": message})

    async def answer():
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            say({"synced": synced, "docs": {t: d for t, (_, d) in docs.items()}})

    reader = asyncio.create_task(read())
    await answer()
    reader.cancel()


async def bomb(ws):
    # 200 KB of one letter: a few hundred bytes once compressed.
    await ws.send(json.dumps({"op": "ping", "pad": "a" * 200_000}))
    try:
        async for _ in ws:
            pass
    except ConnectionClosed:
        pass
    say({"closed": ws.close_code, "reason": ws.close_reason})


async def main(url, mode):
    ws_url = url.replace("http://", "ws://", 1) + "/api/v1/ws"
    async with connect(ws_url, max_size=None) as ws:
        extensions = [e.name for e in ws.protocol.extensions]
        say({"extensions": extensions})
        await (mirror if mode == "mirror" else bomb)(ws)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
