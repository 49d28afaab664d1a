// The full kube-pulse browser client for a <script type="module"> without
// a bundler: the gateway serves this file at /ui/client/kube-pulse.js and
// the ES modules of esm/ beside it (src/http/web.rs). Bundlers and Node
// take the package's `exports` (esm/, cjs/) instead.
export * from './esm/kube-pulse.js';
