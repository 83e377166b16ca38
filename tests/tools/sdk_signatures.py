"""Signs and verifies webhook cases with the providers' own SDKs, for hookline's cross-check test.

Reads a JSON list of cases on stdin; writes a JSON list with, for each case, the signature the SDK produces
(`sdk`) and whether the SDK accepts the signature hookline produced (`sdk_accepts_ours`).
"""

import json
import sys
from datetime import datetime, timezone


def stripe_case(case):
    import stripe

    sdk = stripe.WebhookSignature.generate_signature_header(case["payload"], case["secret"], case["timestamp"])
    try:
        stripe.WebhookSignature.verify_header(case["payload"], case["ours"], case["secret"], tolerance=None)
        accepts = True
    except stripe.SignatureVerificationError:
        accepts = False
    return sdk, accepts


def standard_webhooks_case(case, module, prefix):
    timestamp = datetime.fromtimestamp(case["timestamp"], tz=timezone.utc)
    webhook = module.Webhook(case["secret"])
    sdk = webhook.sign(case["msg_id"], timestamp, case["payload"])
    headers = {
        f"{prefix}-id": case["msg_id"],
        f"{prefix}-timestamp": str(case["timestamp"]),
        f"{prefix}-signature": case["ours"],
    }
    try:
        webhook.verify(case["payload"], headers)
        accepts = True
    except Exception:  # Each SDK raises its own verification error type.
        accepts = False
    return sdk, accepts


def slack_case(case):
    from slack_sdk.signature import SignatureVerifier

    verifier = SignatureVerifier(case["secret"])
    timestamp = str(case["timestamp"])
    sdk = verifier.generate_signature(timestamp=timestamp, body=case["payload"])
    return sdk, verifier.is_valid(case["payload"], timestamp, case["ours"])


def twilio_case(case):
    from twilio.request_validator import RequestValidator

    validator = RequestValidator(case["secret"])
    params = dict(case["params"])
    sdk = validator.compute_signature(case["url"], params)
    return sdk, validator.validate(case["url"], params, case["ours"])


def jwt_case(case):
    """An HS256 JWT signed by PyJWT with the case's claims, checked the way the providers document (PyJWT's decode
    with the algorithm pinned, then the body digest claim); plus the refused twins, signed by PyJWT too."""
    import hashlib

    import jwt

    claims, secret = case["claims"], case["secret"]
    sdk = jwt.encode(claims, secret, algorithm="HS256")
    try:
        decoded = jwt.decode(case["ours"], secret, algorithms=["HS256"], issuer=case.get("issuer"),
                             audience=case.get("audience"), options={"require": case.get("require", [])})
        digest = hashlib.sha256(case["payload"].encode()).hexdigest()
        accepts = case.get("body_claim") is None or decoded.get(case["body_claim"]) == digest
    except jwt.InvalidTokenError:
        accepts = False
    past = dict(claims)
    for name in ("iat", "exp"):
        if name in past:
            past[name] -= 3600
    twins = {
        "wrong_secret": jwt.encode(claims, "not-" + secret, algorithm="HS256"),
        "hs512": jwt.encode(claims, secret, algorithm="HS512"),
        "none": jwt.encode(claims, None, algorithm="none"),
        "expired": jwt.encode(past, secret, algorithm="HS256"),
    }
    return sdk, accepts, twins


def adyen_case(case):
    """A standard notification whose `hmacSignature` Adyen's Python library computes (body-fields family)."""
    from Adyen.util import generate_notification_sig, is_valid_hmac_notification

    item = dict(case["item"])
    item["additionalData"] = {"hmacSignature": generate_notification_sig(item, case["secret"]).decode()}
    notification = {"live": "false", "notificationItems": [{"NotificationRequestItem": item}]}
    body = json.dumps(notification, separators=(",", ":"))
    return body, is_valid_hmac_notification(json.loads(body), case["secret"])


def main():
    results = []
    for case in json.load(sys.stdin):
        provider = case["provider"]
        if provider == "stripe":
            sdk, accepts = stripe_case(case)
        elif provider == "standard_webhooks":
            import standardwebhooks.webhooks as module

            sdk, accepts = standard_webhooks_case(case, module, "webhook")
        elif provider == "svix":
            import svix.webhooks as module

            sdk, accepts = standard_webhooks_case(case, module, "svix")
        elif provider == "slack":
            sdk, accepts = slack_case(case)
        elif provider == "twilio":
            sdk, accepts = twilio_case(case)
        elif provider == "adyen":
            sdk, accepts = adyen_case(case)
        elif provider == "jwt":
            sdk, accepts, twins = jwt_case(case)
            results.append({"sdk": sdk, "sdk_accepts_ours": bool(accepts), "twins": twins})
            continue
        else:
            raise SystemExit(f"unknown provider {provider}")
        results.append({"sdk": sdk, "sdk_accepts_ours": bool(accepts)})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
