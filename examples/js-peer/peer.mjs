// A reference peer of mesh's wall, written from docs/wire.md with js-libp2p
// and its defaults (gossipsub's StrictSign and default message ids: wire.md
// 2.1, 2.2). It joins one cluster topic and speaks on it: in clear on a
// public cluster's, through the seal (wire.md 6) on a private cluster's
// when given the token.
//
//   node peer.mjs --node <multiaddr of a mesh node> [--node …] --cluster <c_…> [--token ck_…] [--private]
//
// It is driven over stdio, one JSON object a line. It writes events:
//   {"event":"ready","peer_id":…}            connected and subscribed
//   {"event":"message","from":…,"payload":…,"origin":…}  a wall msg it could read
//   {"event":"unreadable","origin":…}        a message it could not open (no token)
//   {"event":"sent","n":…} / {"event":"left"} / {"event":"joined"} / {"event":"replayed","count":…}
//   {"event":"heartbeat"}                    a gossipsub heartbeat ended (its gossip, IHAVE, sent)
//   {"event":"error","detail":…}
// and takes commands:
//   {"cmd":"send","from":"<handle>","payload":<any JSON>}
//   {"cmd":"leave"} / {"cmd":"join"}       unsubscribe from / subscribe to the topic again
//   {"cmd":"replay"}                        re-publish, under its own key, every message it received
//   {"cmd":"quit"}
import { createInterface } from 'node:readline'
import { hkdfSync, randomBytes } from 'node:crypto'
import { parseArgs } from 'node:util'

// Node 20 lacks Promise.withResolvers, which js-libp2p 2 uses.
if (typeof Promise.withResolvers !== 'function') {
  Promise.withResolvers = function () {
    let resolve, reject
    const promise = new Promise((res, rej) => { resolve = res; reject = rej })
    return { promise, resolve, reject }
  }
}

const { createLibp2p } = await import('libp2p')
const { tcp } = await import('@libp2p/tcp')
const { noise } = await import('@chainsafe/libp2p-noise')
const { yamux } = await import('@chainsafe/libp2p-yamux')
const { identify } = await import('@libp2p/identify')
const { gossipsub } = await import('@chainsafe/libp2p-gossipsub')
const { multiaddr } = await import('@multiformats/multiaddr')
const { xchacha20poly1305 } = await import('@noble/ciphers/chacha')

const emit = (v) => process.stdout.write(JSON.stringify(v) + '\n')

// The seal (wire.md 6): XChaCha20-Poly1305 under HKDF-SHA256(token, salt
// cluster id, info "mesh wall v1 wire key"), nonce(24) ‖ ciphertext ‖ tag,
// associated data "<cluster id>\n<purpose>".
export function wireKey (token, cluster) {
  return new Uint8Array(hkdfSync('sha256', token, cluster, 'mesh wall v1 wire key', 32))
}

function ad (cluster, purpose) {
  return new TextEncoder().encode(`${cluster}\n${purpose}`)
}

export function seal (key, cluster, purpose, plain, nonce = randomBytes(24)) {
  const ct = xchacha20poly1305(key, nonce, ad(cluster, purpose)).encrypt(plain)
  const out = new Uint8Array(24 + ct.length)
  out.set(nonce, 0)
  out.set(ct, 24)
  return out
}

export function open (key, cluster, purpose, sealed) {
  if (sealed.length < 40) throw new Error('too short to open')
  return xchacha20poly1305(key, sealed.subarray(0, 24), ad(cluster, purpose)).decrypt(sealed.subarray(24))
}

// The test vector of wire.md 12.2: a peer that disagrees with it must not
// speak.
function checkVector () {
  const key = wireKey('ck_test', 'c_test')
  const hex = (b) => Buffer.from(b).toString('hex')
  if (hex(key) !== 'a5f8c3a9c6c6265b164b4737e3a7e4aa35aaa99c3471e158bcbd821cc4807214') throw new Error('wire key vector')
  const nonce = Uint8Array.from({ length: 24 }, (_, i) => i)
  const plain = new TextEncoder().encode('{"t":"beat","epoch":1,"rev":0,"digest":"00000000000000000000000000000000","at":1,"n":1}')
  const got = hex(seal(key, 'c_test', 'topic\n12D3KooWA4Xop1JaT3MHxwYMkCepYsv4iPVopMXwCz5iHYdBfeSB', plain, nonce))
  if (got !== '000102030405060708090a0b0c0d0e0f1011121314151617661fcb9e56a45c67c5764d3ad522768d4af8d2fb10d5134e738d17aea45ebf60e124025382abb65b6b1c8a3ddb23d8927af646dbacbae691dc56c2fec57c47e12aaf49327c4a5b975a6fcd8d1d2310d82d2e453bd52baf4a8e068eba2e1513c7734d49db609021') {
    throw new Error('seal vector: ' + got)
  }
}

const { values: args } = parseArgs({
  options: {
    node: { type: 'string', multiple: true },
    cluster: { type: 'string' },
    token: { type: 'string' },
    private: { type: 'boolean' }
  }
})
checkVector()
const priv = args.private || args.token !== undefined
// Topics (wire.md 3): public clusters on mesh/wall/1/, private ones on mesh/wall/2/.
const topic = (priv ? 'mesh/wall/2/' : 'mesh/wall/1/') + args.cluster
const key = args.token !== undefined ? wireKey(args.token, args.cluster) : null

const node = await createLibp2p({
  addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
  transports: [tcp()],
  connectionEncrypters: [noise()],
  streamMuxers: [yamux()],
  services: { identify: identify(), pubsub: gossipsub() } // every gossipsub default: StrictSign, msgIdFnStrictSign
})
const self = node.peerId.toString()
const pubsub = node.services.pubsub
const received = []

pubsub.addEventListener('message', (evt) => {
  const m = evt.detail
  if (m.topic !== topic || m.type !== 'signed') return
  const origin = m.from.toString()
  if (origin === self) return
  received.push(m.data)
  let plain = m.data
  if (priv) {
    try {
      plain = open(key ?? new Uint8Array(32), args.cluster, `topic\n${origin}`, m.data)
    } catch {
      emit({ event: 'unreadable', origin })
      return
    }
  }
  let w
  try { w = JSON.parse(new TextDecoder().decode(plain)) } catch { return }
  if (w.t === 'msg') emit({ event: 'message', from: w.from, payload: w.payload, origin })
})

pubsub.addEventListener('gossipsub:heartbeat', () => emit({ event: 'heartbeat' }))

// What this peer publishes: a room of its own (wire.md 4.1): an epoch in
// microseconds, its msg seq, and n over everything it publishes.
const epoch = Date.now() * 1000
let seq = 0
let n = 0

async function send (from, payload) {
  const w = { t: 'msg', id: randomBytes(12).toString('base64url'), from, ts: Date.now(), payload, epoch, seq: ++seq, at: Date.now(), n: ++n }
  let data = new TextEncoder().encode(JSON.stringify(w))
  if (priv) data = seal(key, args.cluster, `topic\n${self}`, data)
  await pubsub.publish(topic, data)
  emit({ event: 'sent', n })
}

for (const addr of args.node) await node.dial(multiaddr(addr))
pubsub.subscribe(topic)
emit({ event: 'ready', peer_id: self })

const lines = createInterface({ input: process.stdin })
for await (const line of lines) {
  let c
  try { c = JSON.parse(line) } catch { continue }
  try {
    switch (c.cmd) {
      case 'send': await send(c.from, c.payload); break
      case 'leave': pubsub.unsubscribe(topic); emit({ event: 'left' }); break
      case 'join': pubsub.subscribe(topic); emit({ event: 'joined' }); break
      case 'replay':
        for (const data of received) await pubsub.publish(topic, data)
        emit({ event: 'replayed', count: received.length })
        break
      case 'quit': await node.stop(); process.exit(0)
    }
  } catch (err) {
    emit({ event: 'error', detail: String(err?.message ?? err) })
  }
}
await node.stop()
