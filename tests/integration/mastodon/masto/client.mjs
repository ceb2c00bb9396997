// masto.js 8.0.0 against walfeed, unmodified (tests/integration/mastodon/test_masto_js.py runs it):
// register an app, log in with the password grant, follow, post, read the home timeline with its paginator,
// and receive the post as a streamed update over the WebSocket. Prints one JSON line of what it saw; exit 0.
import { createOAuthAPIClient, createRestAPIClient, createStreamingAPIClient } from "masto";

// masto 8 asks for Node 22; on Node 20 only Promise.withResolvers (ES2024) is missing: the standard's definition.
Promise.withResolvers ??= function withResolvers() {
  let resolve, reject;
  const promise = new this((yes, no) => { resolve = yes; reject = no; });
  return { promise, resolve, reject };
};

const [url, readerName, authorName, password] = process.argv.slice(2);
const deadline = Date.now() + 30_000;

async function until(what, probe) {
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50)); // the poll interval, not a wait for a state
  }
}

const app = await createRestAPIClient({ url }).v1.apps.create({
  clientName: "masto.js test", redirectUris: "urn:ietf:wg:oauth:2.0:oob", scopes: "read write follow",
});
const oauth = createOAuthAPIClient({ url });
async function logIn(username) {
  const token = await oauth.token.create({
    grantType: "password", clientId: app.clientId, clientSecret: app.clientSecret, username, password,
    scope: "read write follow",
  });
  return token.accessToken;
}
const readerToken = await logIn(readerName);
const reader = createRestAPIClient({ url, accessToken: readerToken });
const author = createRestAPIClient({ url, accessToken: await logIn(authorName) });

const me = await reader.v1.accounts.verifyCredentials();
const target = await reader.v1.accounts.lookup({ acct: authorName });
const relationship = await reader.v1.accounts.$select(target.id).follow();

const instance = await reader.v1.instance.fetch();
const streaming = createStreamingAPIClient({
  streamingApiUrl: instance.urls.streamingApi, accessToken: readerToken, retry: false,
});
const subscription = streaming.user.subscribe();
const events = subscription[Symbol.asyncIterator]();
const firstEvent = events.next(); // connects and subscribes
await until("the stream held by the api", async () => {
  const metrics = await (await fetch(`${url}/metrics`)).text();
  return /^walfeed_api_mastodon_streams (\d+(\.\d+)?)$/m.exec(metrics)?.[1] >= 1;
});

const posted = [];
for (const text of ["one from masto.js", "two", "three", "four", "five"]) {
  posted.push((await author.v1.statuses.create({ status: text })).id);
}
let streamed = [];
let next = firstEvent;
while (streamed.length < posted.length) {
  const { value } = await Promise.race([next, until("streamed updates", async () => false)]);
  if (value.event === "update") streamed.push(value.payload.id);
  next = events.next();
}

async function paged() {
  const ids = [];
  for await (const page of reader.v1.timelines.home.list({ limit: 2 })) {
    ids.push(...page.map((status) => status.id));
  }
  return ids;
}
const timeline = await until("every post in the home timeline", async () => {
  const ids = await paged();
  return posted.every((id) => ids.includes(id)) ? ids : null;
});
subscription.unsubscribe();
streaming.close();
console.log(JSON.stringify({ me: me.username, following: relationship.following, posted, streamed, timeline }));
process.exit(0);
