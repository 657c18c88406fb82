// What a plane keeps in its state folder (`.opfn` by default), named once; the CLI reads these
// names without loading the plane.
export const DEAD_LETTER_FILE = 'dead-letters.jsonl';
/** The running plane's pid and broker URL, for `opfn dead-letters replay`. */
export const PLANE_STATE_FILE = 'plane.json';
/** The control plane `opfn cluster up` keeps running: its pid, server and kubeconfig. */
export const CLUSTER_STATE_FILE = 'cluster.json';
