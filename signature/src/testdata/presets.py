#!/usr/bin/env python3
"""Writes presets.json: one request per named preset, signed here with Python's own hmac, hashlib, base64 and
(for Telnyx) the `cryptography` package's Ed25519, following each provider's documented algorithm. Independent of
the Rust code under test on purpose: a preset that misreads its provider's documentation fails against these.

Each case also says how to make its refused twins (tampered body, wrong secret, stale time, missing signature).
Run from this directory: `python3 presets.py > presets.json`.
"""

import base64
import hashlib
import hmac
import json

NOW_S = 1_700_000_000
NOW_MS = NOW_S * 1000


def mac(key, message, digest=hashlib.sha256):
    if isinstance(key, str):
        key = key.encode()
    if isinstance(message, str):
        message = message.encode()
    return hmac.new(key, message, digest).digest()


def hexmac(key, message, digest=hashlib.sha256):
    return mac(key, message, digest).hex()


def b64mac(key, message, digest=hashlib.sha256):
    return base64.b64encode(mac(key, message, digest)).decode()


def sha256_id(text):
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


cases = []


def case(scheme, secret, headers, body, *, tampered=True, stale_ms=None, missing=None, missing_body=None,
         query=None, missing_query=None, event_id=None, method="POST", key_text=None, url=None):
    """`secret` is the configured secret's text; `tampered`: whether a changed body must be refused (a token covers
    no body); `stale_ms`: a clock at which the timestamp is too old; `missing`: the header whose absence is
    refused as a missing signature."""
    if tampered is True:
        tampered = body.replace("e", "E", 1) if "e" in body else body + " "
    cases.append({
        "scheme": scheme,
        "secret": secret if key_text is None else key_text,
        "wrong_secret": "not-the-" + (secret if key_text is None else "key"),
        "method": method,
        "query": query,
        "url": url,
        "headers": headers,
        "body": body,
        "now_ms": NOW_MS,
        "stale_now_ms": stale_ms,
        "tampered_body": tampered or None,
        "missing_header": missing,
        "missing_body": missing_body,
        "missing_query": missing_query,
        "event_id": event_id,
    })


def body_hmac(scheme, header, secret, body, *, prefix="", encoding="hex", digest=hashlib.sha256, key=None,
              event_id=None, extra_headers=()):
    raw = mac(key if key is not None else secret, body, digest)
    encoded = raw.hex() if encoding == "hex" else base64.b64encode(raw).decode()
    case(scheme, secret, [[header, prefix + encoded], *extra_headers], body, missing=header, event_id=event_id)


JSON = '{"id":"evt_7","type":"thing.created","event":"thing.created","data":{"n":1}}'
DIGEST = sha256_id(JSON)

# The generic HMAC-of-the-body family.
body_hmac("meta", "X-Hub-Signature-256", "meta-app-secret-0123", '{"object":"whatsapp_business_account","entry":[]}',
          prefix="sha256=")
body_hmac("jira", "X-Hub-Signature", "jira-secret-0123", '{"webhookEvent":"jira:issue_created"}', prefix="sha256=",
          extra_headers=[["X-Atlassian-Webhook-Identifier", "unsigned-1"]])
body_hmac("bitbucket", "X-Hub-Signature", "bitbucket-secret-0123", JSON, prefix="sha256=", event_id=DIGEST,
          extra_headers=[["X-Request-UUID", "unsigned-uuid"]])
body_hmac("razorpay", "X-Razorpay-Signature", "razorpay-secret-0123", '{"event":"payment.captured"}')
body_hmac("vercel", "x-vercel-signature", "vercel-secret-0123", JSON, digest=hashlib.sha1, event_id="evt_7")
body_hmac("sentry", "Sentry-Hook-Signature", "sentry-client-secret-0123", JSON)
body_hmac("segment", "X-Signature", "segment-secret-0123", '{"messageId":"m-1","type":"track"}',
          digest=hashlib.sha1, event_id="m-1")
body_hmac("coinbase_commerce", "X-CC-Webhook-Signature", "coinbase-secret-0123",
          '{"id":1,"event":{"id":"24934862-d980-46cb-9402-43c81b0cdba6","type":"charge:created"}}',
          event_id="24934862-d980-46cb-9402-43c81b0cdba6")
body_hmac("line", "x-line-signature", "line-channel-secret", '{"destination":"U1","events":[]}', encoding="base64")
body_hmac("xero", "x-xero-signature", "xero-webhook-key-0123", '{"events":[],"firstEventSequence":0}',
          encoding="base64")
body_hmac("notion", "X-Notion-Signature", "secret_notion_verification_token", JSON, prefix="sha256=")
body_hmac("lemon_squeezy", "X-Signature", "lemon-secret-0123", '{"meta":{"event_name":"order_created"}}')
body_hmac("gocardless", "Webhook-Signature", "gocardless-secret-0123", '{"events":[{"id":"EV1"}]}')
body_hmac("checkout", "Cko-Signature", "checkout-secret-0123", JSON, event_id="evt_7")
body_hmac("cal_com", "X-Cal-Signature-256", "cal-secret-0123", '{"triggerEvent":"BOOKING_CREATED"}')
body_hmac("attio", "Attio-Signature", "attio-secret-0123", '{"webhook_id":"w1","events":[]}')
body_hmac("clickup", "X-Signature", "clickup-secret-0123", '{"event":"taskCreated","task_id":"t1"}')
body_hmac("gitea", "X-Gitea-Signature", "gitea-secret-0123", JSON)
body_hmac("paystack", "x-paystack-signature", "sk_test_paystack_0123", '{"event":"charge.success"}',
          digest=hashlib.sha512)
body_hmac("helpscout", "X-HelpScout-Signature", "helpscout-secret-0123", JSON, encoding="base64",
          digest=hashlib.sha1)
body_hmac("hookdeck", "x-hookdeck-signature", "hookdeck-secret-0123", JSON, encoding="base64")
body_hmac("dropbox", "X-Dropbox-Signature", "dropbox-app-secret", '{"list_folder":{"accounts":["dbid:1"]}}')
body_hmac("nylas", "x-nylas-signature", "nylas-secret-0123", JSON, event_id="evt_7")
body_hmac("tally", "Tally-Signature", "tally-secret-0123", '{"eventId":"e-1","eventType":"FORM_RESPONSE"}',
          encoding="base64", event_id="e-1")
AIRTABLE_KEY = bytes(range(32))
body_hmac("airtable", "X-Airtable-Content-MAC", base64.b64encode(AIRTABLE_KEY).decode(), JSON,
          prefix="hmac-sha256=", key=AIRTABLE_KEY)
cases[-1]["wrong_secret"] = base64.b64encode(bytes(32)).decode()
body_hmac("launchdarkly", "X-LD-Signature", "ld-secret-0123", '{"kind":"flag"}')
body_hmac("discourse", "X-Discourse-Event-Signature", "discourse-secret-0123", JSON, prefix="sha256=")
body_hmac("terraform_cloud", "X-TFE-Notification-Signature", "tfc-token-0123", JSON, digest=hashlib.sha512)
body_hmac("pusher", "X-Pusher-Signature", "pusher-app-secret", '{"time_ms":1700000000000,"events":[]}')
ONFLEET_KEY = bytes(range(32, 64))
body_hmac("onfleet", "X-Onfleet-Signature", ONFLEET_KEY.hex(), '{"triggerName":"taskCompleted"}',
          digest=hashlib.sha512, key=ONFLEET_KEY)
cases[-1]["wrong_secret"] = bytes(32).hex()
body_hmac("easypost", "X-Hmac-Signature", "easypost-secret-0123", '{"id":"evt_9","description":"tracker.updated"}',
          prefix="hmac-sha256-hex=", event_id="evt_9")
body_hmac("x", "x-twitter-webhooks-signature", "x-consumer-secret-0123", '{"for_user_id":"1","tweet_create_events":[]}',
          prefix="sha256=", encoding="base64")

# DocuSign: one header per key; the matching one is the second.
docusign_body = '{"event":"envelope-completed","data":{"envelopeId":"e1"}}'
case("docusign", "docusign-key-2", [["X-DocuSign-Signature-1", b64mac("docusign-key-1", docusign_body)],
                                     ["X-DocuSign-Signature-2", b64mac("docusign-key-2", docusign_body)]],
     docusign_body, missing=None)
case("docusign", "docusign-key-1", [["X-DocuSign-Signature-1", b64mac("docusign-key-1", docusign_body)]],
     docusign_body, missing="X-DocuSign-Signature-1")

# Timestamped HMACs.
ZENDESK_TS = "2023-11-14T22:13:20Z"  # NOW_S in RFC 3339
zendesk_body = '{"type":"zen:event-type:ticket.created","id":"z1"}'
case("zendesk", "zendesk-signing-secret", [["X-Zendesk-Webhook-Signature", b64mac("zendesk-signing-secret", ZENDESK_TS + zendesk_body)],
                                           ["X-Zendesk-Webhook-Signature-Timestamp", ZENDESK_TS]],
     zendesk_body, stale_ms=NOW_MS + 301_000, missing="X-Zendesk-Webhook-Signature")
cio_body = '{"event_id":"01E2EMRMM6TZ12TF9WGZN0WJQT","metric":"sent"}'
case("customer_io", "cio-webhook-key", [["X-CIO-Signature", hexmac("cio-webhook-key", f"v0:{NOW_S}:{cio_body}")],
                                       ["X-CIO-Timestamp", str(NOW_S)]],
     cio_body, stale_ms=NOW_MS + 301_000, missing="X-CIO-Signature", event_id="01E2EMRMM6TZ12TF9WGZN0WJQT")
webflow_body = '{"triggerType":"form_submission","payload":{}}'
case("webflow", "webflow-secret", [["x-webflow-signature", hexmac("webflow-secret", f"{NOW_MS}:{webflow_body}")],
                                   ["x-webflow-timestamp", str(NOW_MS)]],
     webflow_body, stale_ms=NOW_MS + 301_000, missing="x-webflow-signature")
case("frameio", "frameio-secret", [["X-Frameio-Signature", "v0=" + hexmac("frameio-secret", f"v0:{NOW_S}:{JSON}")],
                                   ["X-Frameio-Request-Timestamp", str(NOW_S)]],
     JSON, stale_ms=NOW_MS + 301_000, missing="X-Frameio-Signature")

# Structured headers.
calendly_body = '{"event":"invitee.created","payload":{}}'
case("calendly", "calendly-signing-key",
     [["Calendly-Webhook-Signature", f"t={NOW_S},v1=" + hexmac("calendly-signing-key", f"{NOW_S}.{calendly_body}")]],
     calendly_body, stale_ms=NOW_MS + 181_000, missing="Calendly-Webhook-Signature")
workos_body = '{"id":"event_01","event":"user.created","data":{}}'
case("workos", "workos-secret", [["WorkOS-Signature", f"t={NOW_MS}, v1=" + hexmac("workos-secret", f"{NOW_MS}.{workos_body}")]],
     workos_body, stale_ms=NOW_MS + 181_000, missing="WorkOS-Signature", event_id="event_01")
case("mux", "mux-secret", [["Mux-Signature", f"t={NOW_S},v1=" + hexmac("mux-secret", f"{NOW_S}.{JSON}")]],
     JSON, stale_ms=NOW_MS + 301_000, missing="Mux-Signature", event_id="evt_7")
case("elevenlabs", "wsec_elevenlabs", [["ElevenLabs-Signature", f"t={NOW_S},v0=" + hexmac("wsec_elevenlabs", f"{NOW_S}.{JSON}")]],
     JSON, stale_ms=NOW_MS + 1_801_000, missing="ElevenLabs-Signature")
case("buildkite", "buildkite-token",
     [["X-Buildkite-Signature", f"timestamp={NOW_S},signature=" + hexmac("buildkite-token", f"{NOW_S}.{JSON}")]],
     JSON, stale_ms=NOW_MS + 301_000, missing="X-Buildkite-Signature")
case("circleci", "circleci-secret", [["circleci-signature", "v1=" + hexmac("circleci-secret", JSON)]],
     JSON, missing="circleci-signature", event_id="evt_7")

# Standard Webhooks.
SW_KEY = bytes(range(100, 124))
for scheme in ["openai", "replicate"]:
    sw_body = '{"type":"response.completed","status":"succeeded"}'
    signed = f"msg_2Ab.{NOW_S}.{sw_body}"
    case(scheme, "whsec_" + base64.b64encode(SW_KEY).decode(),
         [["webhook-id", "msg_2Ab"], ["webhook-timestamp", str(NOW_S)],
          ["webhook-signature", "v1," + base64.b64encode(mac(SW_KEY, signed)).decode()]],
         sw_body, stale_ms=NOW_MS + 301_000, missing="webhook-signature", event_id="msg_2Ab",
         key_text="whsec_" + base64.b64encode(SW_KEY).decode())
    cases[-1]["wrong_secret"] = "whsec_" + base64.b64encode(bytes(24)).decode()

# Telnyx: Ed25519 over `timestamp|body`.
try:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    private = Ed25519PrivateKey.from_private_bytes(bytes([9]) * 32)
    public = base64.b64encode(private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()
    other = base64.b64encode(Ed25519PrivateKey.from_private_bytes(bytes([10]) * 32).public_key()
                             .public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()
    telnyx_body = '{"data":{"event_type":"call.initiated","id":"0ccc7b54"}}'
    signature = base64.b64encode(private.sign(f"{NOW_S}|{telnyx_body}".encode())).decode()
    case("telnyx", public, [["telnyx-signature-ed25519", signature], ["telnyx-timestamp", str(NOW_S)]],
         telnyx_body, stale_ms=NOW_MS + 301_000, missing="telnyx-signature-ed25519", event_id="0ccc7b54")
    cases[-1]["wrong_secret"] = other
except ImportError:
    pass

# Body fields: Mailgun.
token = "f3b9a0d1c2e4b5a6978899aabbccddeeff00112233445566aa"
mg_signature = hexmac("mailgun-signing-key", f"{NOW_S}{token}")
mailgun_body = json.dumps({"signature": {"timestamp": str(NOW_S), "token": token, "signature": mg_signature},
                           "event-data": {"event": "delivered", "id": "CPgfbmQMTCKtHW6uIWtuVe"}}, separators=(",", ":"))
case("mailgun", "mailgun-signing-key", [], mailgun_body, tampered=mailgun_body.replace(token, token[::-1]),
     stale_ms=NOW_MS + 301_000, missing_body=mailgun_body.replace(f',"signature":"{mg_signature}"', ""),
     event_id=sha256_id(f"{NOW_S}{token}"))

# Body fields: Adyen, the official vector of Adyen's own libraries (key, fields and signature from their tests).
ADYEN_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
ADYEN_SIGNED = "7914073381342284::TestMerchant:TestPayment-1407325143704:1130:EUR:AUTHORISATION:true"
assert b64mac(bytes.fromhex(ADYEN_KEY), ADYEN_SIGNED) == "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0="
adyen_body = ('{"live":"false","notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":'
              '"coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0="},"amount":{"value":1130,"currency":"EUR"},'
              '"pspReference":"7914073381342284","eventCode":"AUTHORISATION","merchantAccountCode":"TestMerchant",'
              '"merchantReference":"TestPayment-1407325143704","paymentMethod":"visa","success":"true"}}]}')
case("adyen", ADYEN_KEY, [], adyen_body, tampered=adyen_body.replace("1130", "1131"),
     missing_body=adyen_body.replace('"hmacSignature":"coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0="', '"x":"y"'),
     event_id=sha256_id(ADYEN_SIGNED))
cases[-1]["wrong_secret"] = "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00"

# Tokens: a token proves who sent a request, not what it holds, so there is no tampered-body twin.
case("okta", "okta-authorization-value", [["Authorization", "okta-authorization-value"]],
     '{"eventId":"okta-1","eventType":"com.okta.event_hook","data":{}}', tampered=None, missing="Authorization",
     event_id="okta-1")
for scheme in ["postmark", "chargebee", "pipedrive", "azure_devops"]:
    credentials = base64.b64encode(b"hookline:" + scheme.encode() + b"-password").decode()
    case(scheme, f"hookline:{scheme}-password", [["Authorization", "Basic " + credentials]], JSON, tampered=None,
         missing="Authorization")
case("telegram", "telegram-secret_token-1", [["X-Telegram-Bot-Api-Secret-Token", "telegram-secret_token-1"]],
     '{"update_id":812345,"message":{}}', tampered=None, missing="X-Telegram-Bot-Api-Secret-Token", event_id="812345")
case("auth0", "Bearer auth0-log-stream-token", [["Authorization", "Bearer auth0-log-stream-token"]],
     '[{"log_id":"1"}]', tampered=None, missing="Authorization")
case("azure_event_grid", "event-grid-code", [], '[{"id":"1","eventType":"Microsoft.Storage.BlobCreated"}]',
     tampered=None, query="code=event-grid-code", missing_query="other=1")
graph_body = '{"value":[{"subscriptionId":"s1","clientState":"graph-client-state","changeType":"created"}]}'
case("microsoft_graph", "graph-client-state", [], graph_body, tampered=None,
     missing_body=graph_body.replace('"clientState":"graph-client-state",', ""))
figma_body = '{"event_type":"FILE_UPDATE","passcode":"figma-passcode","file_key":"k"}'
case("figma", "figma-passcode", [], figma_body, tampered=None,
     missing_body=figma_body.replace('"passcode":"figma-passcode",', ""))


# JWT-signed webhooks: HS256 tokens assembled here from base64url, json and hmac, following RFC 7519 and each
# provider's documented claims (the SDK cross-check signs them with PyJWT too).
def b64url(raw):
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def hs256_jwt(secret, claims):
    signing_input = b64url(b'{"alg":"HS256","typ":"JWT"}') + "." + b64url(json.dumps(claims).encode())
    return signing_input + "." + b64url(mac(secret, signing_input))


netlify_body = '{"id":"5ebc34bf4fea0b01f02efa3a","site_id":"fa4dd95a","state":"ready","context":"production"}'
netlify_token = hs256_jwt("netlify-jws-secret-0123", {"iss": "netlify",
                                                       "sha256": hashlib.sha256(netlify_body.encode()).hexdigest()})
case("netlify", "netlify-jws-secret-0123", [["X-Webhook-Signature", netlify_token]], netlify_body,
     missing="X-Webhook-Signature", event_id=sha256_id(netlify_body))

vonage_body = '{"message_uuid":"aaaaaaaa-bbbb-cccc-dddd-0123456789ab","to":"447700900000","status":"delivered"}'
vonage_token = hs256_jwt("vonage-signature-secret-0123", {
    "iat": NOW_S, "jti": "c5ba8f24-1a14-4c10-bfdf-3fbe8ce511b5", "iss": "Vonage",
    "payload_hash": hashlib.sha256(vonage_body.encode()).hexdigest(), "api_key": "a1b2c3d",
    "application_id": "aaaaaaaa-bbbb-cccc-dddd-0123456789ab"})
case("vonage", "vonage-signature-secret-0123", [["Authorization", "Bearer " + vonage_token]], vonage_body,
     stale_ms=NOW_MS + 301_000, missing="Authorization", event_id=sha256_id(vonage_body))

monday_url = "https://hooks.example.com/monday"
monday_body = '{"event":{"type":"update_column_value","boardId":1,"pulseId":2}}'
monday_token = hs256_jwt("monday-signing-secret-0123", {
    "accountId": 1825529, "userId": 4012689, "aud": monday_url, "exp": NOW_S + 300,
    "shortLivedToken": "short-lived", "iat": NOW_S})
case("monday", "monday-signing-secret-0123", [["Authorization", monday_token]], monday_body, tampered=None,
     stale_ms=NOW_MS + 301_000, missing="Authorization", url=monday_url)

print(json.dumps(cases, indent=1))
