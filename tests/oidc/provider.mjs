// A real OpenID Connect provider (the `oidc-provider` package) for the OIDC bearer-token tests
// (mcp/tests/it/oidc.rs). Everything comes from the test through the environment:
//   OIDC_JWKS     the provider's signing keys (a private JWKS, JSON), so the test can also mint
//                 tokens of its own with the same keys
//   OIDC_RESOURCE the resource indicator (the MCP server's audience)
//   OIDC_CLIENTS  [{"client_id", "client_secret", "groups": [..], "email"}]: client_credentials
//                 clients; each token carries its client's groups and email
// It listens on a free loopback port and prints `oidc-provider ready <issuer>` once it serves.
import http from 'node:http';
import Provider from 'oidc-provider';

const jwks = JSON.parse(process.env.OIDC_JWKS);
const resource = process.env.OIDC_RESOURCE;
const clients = JSON.parse(process.env.OIDC_CLIENTS);
const byId = new Map(clients.map((c) => [c.client_id, c]));

const server = http.createServer();
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const issuer = `http://127.0.0.1:${port}`;
  const provider = new Provider(issuer, {
    jwks,
    clients: clients.map((c) => ({
      client_id: c.client_id,
      client_secret: c.client_secret,
      grant_types: ['client_credentials'],
      redirect_uris: [],
      response_types: [],
      id_token_signed_response_alg: 'ES256',
    })),
    scopes: ['mcp'],
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => resource,
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, indicator) => {
          if (indicator !== resource) throw new Error(`unknown resource ${indicator}`);
          return {
            scope: 'mcp',
            audience: resource,
            accessTokenTTL: 300,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'ES256' } },
          };
        },
      },
    },
    // The person's claims ride in the access token (RFC 9068 allows any claim).
    extraTokenClaims: (ctx, token) => {
      const c = byId.get(token.clientId);
      return c ? { groups: c.groups ?? [], email: c.email } : {};
    },
  });
  server.on('request', provider.callback());
  process.stdout.write(`oidc-provider ready ${issuer}\n`);
});
// The test closes stdin (or dies): stop with it.
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
