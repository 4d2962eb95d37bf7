// Builds ../web/static/peer.js, the bundle the node embeds, from src/ and
// the packages of package-lock.json. The build is reproducible: the same
// sources and lockfile give the same bytes (no source map, no absolute
// path, no timestamp), so CI rebuilds it and fails if it differs from the
// committed one.
import { build } from 'esbuild'

await build({
  entryPoints: ['src/main.js'],
  outfile: '../web/static/peer.js',
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: ['chrome120', 'firefox120', 'safari17'],
  minify: true,
  legalComments: 'none',
  sourcemap: false,
  charset: 'utf8',
  logLevel: 'warning'
})
