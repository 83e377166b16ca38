// A real OpenID Connect provider for the console's single sign-on test: the certified `oidc-provider` (panva),
// on a loopback port of its choosing, with one confidential client (the console: authorization code, PKCE
// required, HTTP Basic at the token endpoint) and two users, each with a `roles` claim in the ID token:
// `viewer-ann` (hookline-viewer) and `operator-olga` (hookline-operator). Its development login form takes any
// password; consent is granted without asking. Prints `{"issuer": "..."}` once listening, then serves until killed.
//
// Args: the client's redirect URI, the client's secret.
import http from "node:http";
import Provider from "oidc-provider";

const [redirectUri, clientSecret] = process.argv.slice(2);
if (!redirectUri || !clientSecret) throw new Error("usage: oidc-provider.mjs <redirect uri> <client secret>");
const roles = { "viewer-ann": ["hookline-viewer"], "operator-olga": ["hookline-operator"] };

const server = http.createServer();
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;
const provider = new Provider(issuer, {
  clients: [
    {
      client_id: "hookline-console",
      client_secret: clientSecret,
      redirect_uris: [redirectUri],
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_basic",
    },
  ],
  pkce: { required: () => true },
  scopes: ["openid", "roles"],
  claims: { openid: ["sub"], roles: ["roles"] },
  // The roles go in the ID token itself, which is all the console reads.
  conformIdTokenClaims: false,
  findAccount: async (ctx, id) => ({
    accountId: id,
    claims: async () => ({ sub: id, roles: roles[id] ?? [] }),
  }),
  loadExistingGrant: async (ctx) => {
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope("openid roles");
    grant.addOIDCClaims(["sub", "roles"]);
    await grant.save();
    return grant;
  },
  features: { devInteractions: { enabled: true } },
  cookies: { keys: ["hookline-test-cookie-key"] },
});
server.on("request", provider.callback());
console.log(JSON.stringify({ issuer }));
