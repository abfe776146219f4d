// The googleapis (Node) flow of the gkeemu client suite. It is Google's
// client as shipped, with its own JWT auth from a service account key file:
// nothing here names the emulator. The test routes the real host names
// (oauth2.googleapis.com, container.googleapis.com) to the emulator through
// HTTPS_PROXY and trusts its certificate through NODE_EXTRA_CA_CERTS.
//
// Each step prints one JSON line: {"step": ..., "ok": ..., "value" or "error"}.
'use strict';
const {google} = require('googleapis');

const keyFile = process.env.GKE_KEY_FILE;
const project = process.env.GKE_PROJECT;
const zone = process.env.GKE_ZONE;
const parent = `projects/${project}/locations/${zone}`;

function emit(step, value) {
  process.stdout.write(JSON.stringify({step, ok: true, value}) + '\n');
}

function emitError(step, e) {
  process.stdout.write(JSON.stringify({step, ok: false, error: {code: e.status ?? e.code, message: e.message, status: e.response?.data?.error?.status}}) + '\n');
}

// waitOp reads an operation until it is DONE, at most n times (the
// emulator advances operations per observation, so no timer is needed).
async function waitOp(container, op, n) {
  for (let i = 0; i < n && op.status !== 'DONE'; i++) {
    op = (await container.projects.locations.operations.get({name: `${parent}/operations/${op.name}`})).data;
  }
  return op;
}

async function main() {
  const auth = new google.auth.JWT({keyFile, scopes: ['https://www.googleapis.com/auth/cloud-platform']});
  const container = google.container({version: 'v1', auth});

  let op = (await container.projects.locations.clusters.create({parent, requestBody: {cluster: {
    name: 'n1', initialNodeCount: 1, nodeConfig: {machineType: 'e2-standard-2'}, resourceLabels: {team: 'node'},
  }}})).data;
  emit('create', op);
  emit('wait-create', await waitOp(container, op, 10));
  emit('get', (await container.projects.locations.clusters.get({name: `${parent}/clusters/n1`})).data);
  emit('list', (await container.projects.locations.clusters.list({parent})).data);
  op = (await container.projects.locations.clusters.nodePools.create({parent: `${parent}/clusters/n1`, requestBody: {nodePool: {
    name: 'p2', initialNodeCount: 2, config: {machineType: 'e2-standard-4'}, upgradeSettings: {maxSurge: 1},
  }}})).data;
  emit('wait-pool', await waitOp(container, op, 10));
  op = (await container.projects.locations.clusters.nodePools.setSize({name: `${parent}/clusters/n1/nodePools/p2`, requestBody: {nodeCount: 3}})).data;
  emit('wait-resize', await waitOp(container, op, 10));
  emit('get-pool', (await container.projects.locations.clusters.nodePools.get({name: `${parent}/clusters/n1/nodePools/p2`})).data);
  try {
    await container.projects.locations.clusters.get({name: `${parent}/clusters/nope`});
    emit('get-missing', null);
  } catch (e) {
    emitError('get-missing', e);
  }
  op = (await container.projects.locations.clusters.delete({name: `${parent}/clusters/n1`})).data;
  emit('wait-delete', await waitOp(container, op, 10));
  emit('list-after', (await container.projects.locations.clusters.list({parent})).data);
}

main().catch((e) => {
  emitError('fatal', e);
  process.exitCode = 1;
});
