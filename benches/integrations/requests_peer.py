"""The same vendor calls as benches/integrations.rs, made with Python's
requests (a keep-alive Session), against the same loopback server.

usage: requests_peer.py BASE_URL FILE RUNS PAGES
prints JSON: {"approval_list_ms": median, "feishu_send_ms": median}
"""
import json
import os
import statistics
import sys
import time

import requests

base, path, runs, pages = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
session = requests.Session()


def approval_list():
    token = session.get(
        f"{base}/cgi-bin/gettoken", params={"corpid": "ww1", "corpsecret": "s"}
    ).json()["access_token"]
    numbers, cursor = [], ""
    while True:
        body = session.post(
            f"{base}/cgi-bin/oa/getapprovalinfo",
            params={"access_token": token},
            json={"starttime": "1698768000", "endtime": "1701359999", "new_cursor": cursor,
                  "size": 100, "filters": []},
        ).json()
        if body["errcode"] != 0:
            raise RuntimeError(body)
        numbers.extend(body["sp_no_list"])
        cursor = body["new_next_cursor"]
        if not cursor or not body["sp_no_list"]:
            break
    assert len(numbers) == pages * 100, len(numbers)


def feishu_send():
    token = session.post(
        f"{base}/open-apis/auth/v3/tenant_access_token/internal",
        json={"app_id": "cli_1", "app_secret": "s"},
    ).json()["tenant_access_token"]
    auth = {"Authorization": f"Bearer {token}"}
    with open(path, "rb") as f:
        data = f.read()
    name = os.path.basename(path)
    key = session.post(
        f"{base}/open-apis/im/v1/files",
        headers=auth,
        data={"file_type": "mp4", "file_name": name},
        files={"file": (name, data)},
    ).json()["data"]["file_key"]
    sent = session.post(
        f"{base}/open-apis/im/v1/messages",
        params={"receive_id_type": "chat_id"},
        headers=auth,
        json={"receive_id": "oc_1", "msg_type": "file", "content": json.dumps({"file_key": key})},
    ).json()
    assert sent["code"] == 0


def median_ms(fn):
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


print(json.dumps({"approval_list_ms": median_ms(approval_list), "feishu_send_ms": median_ms(feishu_send)}))
