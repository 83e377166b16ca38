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
        else:
            raise SystemExit(f"unknown provider {provider}")
        results.append({"sdk": sdk, "sdk_accepts_ours": bool(accepts)})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
