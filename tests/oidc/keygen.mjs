// Prints a fresh ES256 signing key for the OIDC tests: `{"jwk": <private JWK with kid>,
// "pkcs8": <PKCS#8 DER, base64>}`. The test hands the JWK to the provider (its JWKS) and signs
// tokens of its own with the DER. Usage: node keygen.mjs KID
import { generateKeyPairSync } from 'node:crypto';

const kid = process.argv[2] ?? 'k1';
const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const jwk = { ...privateKey.export({ format: 'jwk' }), kid, alg: 'ES256', use: 'sig' };
const pkcs8 = privateKey.export({ format: 'der', type: 'pkcs8' }).toString('base64');
process.stdout.write(`${JSON.stringify({ jwk, pkcs8 })}\n`);
