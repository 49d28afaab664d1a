// Fake transports for the client's unit tests: a WebSocket, an
// EventSource and fetch responses whose server side the test plays, and
// the waits the tests use. Nothing here opens a socket.

import assert from 'node:assert/strict';

/** A WebSocket whose server side is the test: `push` a message, `drop` the connection. */
export class FakeSocket {
  static all = [];
  static refuse = false;
  constructor(url, protocols) {
    this.url = url;
    this.protocols = protocols;
    this.sent = [];
    this.readyState = 0;
    this.closedWith = undefined;
    FakeSocket.all.push(this);
    queueMicrotask(() => {
      if (this.readyState !== 0) return;
      if (FakeSocket.refuse) {
        this.readyState = 3;
        this.onclose?.({ code: 1006 });
      } else {
        this.readyState = 1;
        this.onopen?.();
      }
    });
  }
  send(text) {
    this.sent.push(JSON.parse(text));
  }
  close(code) {
    if (this.readyState === 3) return;
    this.readyState = 3;
    this.closedWith = code;
    queueMicrotask(() => this.onclose?.({ code: code ?? 1005 }));
  }
  /** The server's side. */
  push(message) {
    this.onmessage?.({ data: JSON.stringify(message) });
  }
  drop(code = 1006) {
    this.readyState = 3;
    this.onclose?.({ code });
  }
  subscribes() {
    return this.ops('subscribe');
  }
  ops(op) {
    return this.sent.filter((o) => o.op === op);
  }
}

export const tick = (ms = 5) => new Promise((r) => setTimeout(r, ms));

export async function until(what, check) {
  for (let i = 0; i < 400; i++) {
    const v = check();
    if (v) return v;
    await tick();
  }
  assert.fail(`timed out waiting for ${what}`);
}

/** A native EventSource whose server side is the test: `emit` an event, `fail` the stream. */
export class FakeEventSource {
  static all = [];
  constructor(url, init) {
    this.url = url;
    this.init = init;
    this.readyState = 0;
    this.listeners = {};
    FakeEventSource.all.push(this);
    queueMicrotask(() => {
      this.readyState = 1;
      this.onopen?.();
    });
  }
  addEventListener(type, f) {
    (this.listeners[type] ??= []).push(f);
  }
  emit(type, data) {
    for (const f of this.listeners[type] ?? []) f({ data: JSON.stringify(data) });
  }
  fail() {
    this.readyState = 2;
    this.onerror?.({});
  }
  close() {
    this.readyState = 2;
  }
}

/** A finished SSE response with `text` as its body, in two chunks. */
export function sseResponse(text, status = 200) {
  const bytes = new TextEncoder().encode(text);
  return {
    ok: status === 200,
    status,
    headers: new Map(),
    body: new ReadableStream({
      start(controller) {
        controller.enqueue(bytes.slice(0, 10));
        controller.enqueue(bytes.slice(10));
        controller.close();
      },
    }),
  };
}

/** A JSON response. */
export const jsonResponse = (status, body, headers = {}) => ({
  ok: status < 300,
  status,
  statusText: String(status),
  headers: new Map(Object.entries(headers)),
  json: async () => body,
  text: async () => JSON.stringify(body),
});
