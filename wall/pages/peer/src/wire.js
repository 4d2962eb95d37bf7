// The wall's wire (docs/wire.md), as a page speaks it: topics, the wall
// topic messages and their validity rules (4), members and their proofs
// of key (5), the seal of private clusters (6), rosters and their digest
// (8). Pure functions over bytes and JSON; the page's peer (room.js) uses
// them. The seal and the digest check themselves against the test vectors
// of wire.md 12 before a page joins (checkVectors).

import { xchacha20poly1305 } from '@noble/ciphers/chacha.js'
import { ed25519 } from '@noble/curves/ed25519.js'
import { hkdf } from '@noble/hashes/hkdf.js'
import { sha256 } from '@noble/hashes/sha2.js'
import { base58btc } from 'multiformats/bases/base58'

const enc = new TextEncoder()
const dec = new TextDecoder('utf-8', { fatal: true })

export const utf8 = (s) => enc.encode(s)
export const fromUTF8 = (b) => dec.decode(b)
export const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('')

// Topics (wire.md 3): a public cluster's in clear, a private one's sealed.
export const topicOf = (cluster, isPrivate) => (isPrivate ? 'mesh/wall/2/' : 'mesh/wall/1/') + cluster

// Stream protocols (wire.md 7).
export const rosterProto = '/mesh/wall/roster/1.0.0'
export const receiptProto = '/mesh/wall/receipt/2.0.0'
export const rendezvousProto = '/mesh/rendezvous/1.0.0'

// Bounds of wire.md 4 and 5.
export const maxWire = 80111
export const maxPayload = 65536
export const maxRecipients = 100
export const maxCount = 2 ** 53
const maxHandle = 64
const maxDID = 256
const maxProof = 512
const maxChallenge = 64
export const maxRoster = 10000

// Timings (wire.md 4.2) a node keeps, which the page keeps too.
export const beatInterval = 5000
export const presenceTimeout = 15000
export const ackWindow = 2000

// validHandle: 1-64 bytes of UTF-8, printable, no white space (5.1).
export function validHandle (h) {
  return typeof h === 'string' && h.length > 0 && utf8(h).length <= maxHandle && !/[\s\p{C}\p{Z}]/u.test(h)
}

// validDID: "did:" and printable ASCII, at most 256 bytes (5.1).
export function validDID (d) {
  return typeof d === 'string' && d.length <= maxDID && /^did:[!-~]+$/.test(d)
}

const isCount = (v) => v === undefined || (Number.isSafeInteger(v) && v >= 0 && v <= maxCount)
const positive = (v) => Number.isSafeInteger(v) && v > 0

// checkMember fails on a member of cluster that breaks wire.md 5.2,
// its proof of key verified.
export function checkMember (m, cluster) {
  if (m === null || typeof m !== 'object' || !validHandle(m.agent)) throw new Error('member: bad handle')
  if (m.vis !== 'public' && m.vis !== 'private') throw new Error('member: bad visibility')
  if (m.did === undefined || m.did === '') {
    if (m.proof) throw new Error('member: a proof without a did')
    return
  }
  if (!validDID(m.did)) throw new Error('member: bad did')
  if (m.proof) verifyProof(m, cluster)
}

// checkWire fails on a topic message of cluster that breaks wire.md 4.3.
export function checkWire (w, cluster) {
  if (w === null || typeof w !== 'object') throw new Error('not an object')
  if (!isCount(w.seq) || !isCount(w.rev) || !isCount(w.n)) throw new Error('seq, rev or n out of range')
  switch (w.t) {
    case 'msg': {
      if (typeof w.id !== 'string' || w.id === '' || utf8(w.id).length > 32 || !positive(w.ts) || !positive(w.epoch) || !positive(w.seq)) {
        throw new Error('malformed message')
      }
      if (w.payload === undefined || utf8(JSON.stringify(w.payload)).length > maxPayload) throw new Error('bad payload')
      if (w.to != null && (!Array.isArray(w.to) || w.to.length > maxRecipients)) throw new Error('bad recipients')
      if (w.from_did !== undefined && w.from_did !== '' && !validDID(w.from_did)) throw new Error('bad from_did')
      for (const h of [w.from, ...(w.to ?? [])]) if (!validHandle(h)) throw new Error('bad handle')
      return
    }
    case 'join':
    case 'leave':
      if (!w.member || !positive(w.epoch) || !positive(w.rev)) throw new Error('presence delta without member, epoch or rev')
      checkMember(w.member, cluster)
      return
    case 'beat':
      if (!positive(w.epoch) || typeof w.digest !== 'string' || w.digest.length !== 32) throw new Error('malformed beat')
      return
    case 'bye':
      return
  }
  throw new Error(`unknown wire message ${w.t}`)
}

// checkRoster fails on a roster of cluster from another node (8.1).
export function checkRoster (ro, cluster) {
  if (ro === null || typeof ro !== 'object' || !isCount(ro.rev) || !isCount(ro.seq) || !isCount(ro.epoch)) throw new Error('bad roster')
  const ms = ro.members ?? []
  if (!Array.isArray(ms) || ms.length > maxRoster) throw new Error('bad roster members')
  for (const m of ms) checkMember(m, cluster)
}

// The digest of a roster (8.2): the XOR of each member's
// SHA-256(agent 0 did 0 vis)[0:16], as 32 hex characters.
export function digestOf (members) {
  const d = new Uint8Array(16)
  for (const m of members) {
    const sum = sha256(utf8(`${m.agent}\x00${m.did ?? ''}\x00${m.vis}`))
    for (let i = 0; i < 16; i++) d[i] ^= sum[i]
  }
  return hex(d)
}

// The seal (6): XChaCha20-Poly1305 under HKDF-SHA256(token, salt the
// cluster id, info "mesh wall v1 wire key"); nonce ‖ ciphertext ‖ tag,
// associated data "<cluster id>\n<purpose>".
export const wireKey = (token, cluster) => hkdf(sha256, utf8(token), utf8(cluster), utf8('mesh wall v1 wire key'), 32)

const ad = (cluster, purpose) => utf8(`${cluster}\n${purpose}`)

export function seal (key, cluster, purpose, plain, nonce = crypto.getRandomValues(new Uint8Array(24))) {
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

// Sealing purposes (6.3).
export const topicAD = (origin) => `topic\n${origin}`
export const rosterReqAD = (asker, asked, challenge) => `roster request\n${asker}\n${asked}\n${challenge}`
export const rosterRespAD = (asked, asker, challenge) => `roster response\n${asked}\n${asker}\n${challenge}`

// encode and decode a wall value: JSON, sealed under key unless null.
export function encode (key, cluster, purpose, value) {
  const b = utf8(JSON.stringify(value))
  return key ? seal(key, cluster, purpose, b) : b
}

export function decode (key, cluster, purpose, data) {
  return JSON.parse(fromUTF8(key ? open(key, cluster, purpose, data) : data))
}

// base64 (standard, padded) and base64url (no padding) of bytes.
export function b64 (b) {
  let s = ''
  for (const x of b) s += String.fromCharCode(x)
  return btoa(s)
}

export function fromB64 (s) {
  const t = atob(s.replace(/-/g, '+').replace(/_/g, '/'))
  return Uint8Array.from(t, (c) => c.charCodeAt(0))
}

export const b64url = (b) => b64(b).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')

// A did:key of an Ed25519 public key: multicodec ed25519-pub (0xed 0x01).
export function didKey (pub) {
  const b = new Uint8Array(34)
  b.set([0xed, 0x01], 0)
  b.set(pub, 2)
  return 'did:key:' + base58btc.encode(b)
}

// The string a proof of key signs (docs/api.md, Proving a did): a
// Mesh-Sig v1 over GET /v1/clusters/<cluster>/ws with the body
// "<handle>\n<challenge>".
function proofString (cluster, agent, challenge, ts, nonce) {
  return utf8(`MESH1\nGET\n/v1/clusters/${cluster}/ws\n${hex(sha256(utf8(`${agent}\n${challenge}`)))}\n${ts}\n${nonce}`)
}

// proveKey returns the proof of key of the member agent in cluster with
// challenge, signed by sign (bytes -> signature) for public key pub: a
// Mesh-Sig header value.
export async function proveKey (sign, pub, cluster, agent, challenge) {
  const ts = Math.floor(Date.now() / 1000)
  const nonce = hex(crypto.getRandomValues(new Uint8Array(16)))
  const sig = await sign(proofString(cluster, agent, challenge, ts, nonce))
  return `v1 ${b64(pub)} ${ts} ${nonce} ${b64(sig)}`
}

// verifyProof fails unless member m's proof is its did's signature for
// its handle and challenge in cluster (not its time: 5.2).
function verifyProof (m, cluster) {
  if (m.proof.length > maxProof || (m.challenge ?? '').length > maxChallenge) throw new Error('proof or challenge too long')
  const f = m.proof.split(' ')
  if (f.length !== 5 || f[0] !== 'v1') throw new Error('proof: not a Mesh-Sig v1')
  const pub = fromB64(f[1])
  const sig = fromB64(f[4])
  if (pub.length !== 32 || sig.length !== 64 || didKey(pub) !== m.did) throw new Error('proof: another key than the did')
  if (!ed25519.verify(sig, proofString(cluster, m.agent, m.challenge ?? '', f[2], f[3]), pub)) {
    throw new Error('proof: the signature does not verify')
  }
}

// checkVectors checks the seal and the digest against wire.md 12: a page
// that disagrees must not speak.
export function checkVectors () {
  const key = wireKey('ck_test', 'c_test')
  if (hex(key) !== 'a5f8c3a9c6c6265b164b4737e3a7e4aa35aaa99c3471e158bcbd821cc4807214') throw new Error('wire key vector')
  const nonce = Uint8Array.from({ length: 24 }, (_, i) => i)
  const plain = utf8('{"t":"beat","epoch":1,"rev":0,"digest":"00000000000000000000000000000000","at":1,"n":1}')
  const got = hex(seal(key, 'c_test', topicAD('12D3KooWA4Xop1JaT3MHxwYMkCepYsv4iPVopMXwCz5iHYdBfeSB'), plain, nonce))
  if (got !== '000102030405060708090a0b0c0d0e0f1011121314151617661fcb9e56a45c67c5764d3ad522768d4af8d2fb10d5134e738d17aea45ebf60e124025382abb65b6b1c8a3ddb23d8927af646dbacbae691dc56c2fec57c47e12aaf49327c4a5b975a6fcd8d1d2310d82d2e453bd52baf4a8e068eba2e1513c7734d49db609021') {
    throw new Error('seal vector')
  }
  if (digestOf([{ agent: 'alice', vis: 'public' }]) !== '5905a98d4319fa83f814a33acc1c3756') throw new Error('digest vector')
}
