// The page's Ed25519 keys, made with WebCrypto and kept in the browser's
// storage as JWKs:
//
//   - the visitor's did key, in localStorage: the same did:key on every
//     visit, proved on every join (a proof of key, docs/api.md), unless
//     the visitor brings a key of their own (a PKCS#8 PEM, as `mesh`
//     writes key files), which is used for that join and not kept;
//   - the tab's libp2p key, in sessionStorage: each tab is a peer of its
//     own (two tabs sharing a peer id would share its gossipsub state on
//     every node), kept across reloads of the tab.
//
// Where storage is refused (a private window's policy), keys last as long
// as the page.

import { privateKeyFromRaw } from '@libp2p/crypto/keys'
import { didKey, fromB64 } from './wire.js'

const didItem = 'mesh.did-key'
const peerItem = 'mesh.peer-key'

const generate = async () => {
  const kp = await crypto.subtle.generateKey({ name: 'Ed25519' }, true, ['sign', 'verify'])
  return crypto.subtle.exportKey('jwk', kp.privateKey)
}

const isJWK = (j) => j !== null && typeof j === 'object' && j.crv === 'Ed25519' && typeof j.d === 'string' && typeof j.x === 'string'

// kept returns the key kept under item in storage, made and kept first if
// there is none.
async function kept (storage, item) {
  let j = null
  try {
    j = JSON.parse(storage.getItem(item))
  } catch {}
  if (isJWK(j)) return j
  j = await generate()
  try {
    storage.setItem(item, JSON.stringify(j))
  } catch {}
  return j
}

// Key is an Ed25519 key of the page: its public key and did, a signer,
// and the libp2p key it makes.
class Key {
  constructor (jwk) {
    this.jwk = jwk
    this.seed = fromB64(jwk.d)
    this.pub = fromB64(jwk.x)
    this.did = didKey(this.pub)
  }

  // sign signs with the key imported once into WebCrypto, unextractable.
  async sign (bytes) {
    this.signer ??= crypto.subtle.importKey('jwk', { ...this.jwk, key_ops: ['sign'] }, { name: 'Ed25519' }, false, ['sign'])
    return new Uint8Array(await crypto.subtle.sign({ name: 'Ed25519' }, await this.signer, bytes))
  }

  // libp2p is the key as js-libp2p takes it, signing as sign does:
  // js-libp2p's own imports the key into WebCrypto anew for every
  // signature (every message published), which costs more than the
  // signature.
  libp2p () {
    const raw = new Uint8Array(64)
    raw.set(this.seed, 0)
    raw.set(this.pub, 32)
    const k = privateKeyFromRaw(raw)
    k.sign = (bytes) => this.sign(bytes instanceof Uint8Array ? bytes : bytes.subarray())
    return k
  }
}

// didKeyOf is the visitor's kept did key, or the key of pem when given.
export async function didKeyOf (pem) {
  return new Key(pem ? await fromPEM(pem) : await kept(localStorage, didItem))
}

// peerKey is the tab's libp2p key.
export async function peerKey () {
  return new Key(await kept(sessionStorage, peerItem)).libp2p()
}

// fromPEM reads an Ed25519 private key in PKCS#8 PEM.
async function fromPEM (pem) {
  const m = /-----BEGIN PRIVATE KEY-----([A-Za-z0-9+/=\s]+)-----END PRIVATE KEY-----/.exec(pem)
  if (!m) throw new Error('the key is not a PKCS#8 PEM private key (-----BEGIN PRIVATE KEY-----)')
  let k
  try {
    k = await crypto.subtle.importKey('pkcs8', fromB64(m[1].replace(/\s/g, '')), { name: 'Ed25519' }, true, ['sign'])
  } catch {
    throw new Error('the key is not an Ed25519 private key')
  }
  return crypto.subtle.exportKey('jwk', k)
}
