// The control plane's certificates, made with openssl in its folder.
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** How long the certificates, and the ServiceAccount tokens issued for them, are valid. */
export const CERTIFICATE_DAYS = 30;

/** The files writeCertificates leaves in the folder. */
export interface Certificates {
  caPath: string;
  servingCertificate: string;
  servingKey: string;
  serviceAccountPrivateKey: string;
  serviceAccountPublicKey: string;
}

async function openssl(dir: string, ...args: string[]): Promise<void> {
  await run('openssl', args, { cwd: dir });
}

/** A CA, a serving certificate for 127.0.0.1/localhost, and a service-account signing key. */
export async function writeCertificates(dir: string): Promise<Certificates> {
  writeFileSync(join(dir, 'san.cnf'), 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n');
  await openssl(
    dir,
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
    '-days',
    String(CERTIFICATE_DAYS),
    '-subj',
    '/CN=operator-functions-test-ca',
  );
  await openssl(
    dir,
    'req',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-keyout',
    'apiserver.key',
    '-out',
    'apiserver.csr',
    '-subj',
    '/CN=kube-apiserver',
  );
  await openssl(
    dir,
    'x509',
    '-req',
    '-in',
    'apiserver.csr',
    '-CA',
    'ca.crt',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'apiserver.crt',
    '-days',
    String(CERTIFICATE_DAYS),
    '-extfile',
    'san.cnf',
  );
  await openssl(dir, 'ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', 'sa.key');
  await openssl(dir, 'ec', '-in', 'sa.key', '-pubout', '-out', 'sa.pub');
  return {
    caPath: join(dir, 'ca.crt'),
    servingCertificate: join(dir, 'apiserver.crt'),
    servingKey: join(dir, 'apiserver.key'),
    serviceAccountPrivateKey: join(dir, 'sa.key'),
    serviceAccountPublicKey: join(dir, 'sa.pub'),
  };
}
