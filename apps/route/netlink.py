"""In-process netlink requests a pooled route network's restore makes in a machine's network
namespace (the calling thread's: :func:`apps.route.network.enter_netns`), no process.

* :func:`flush_learned_state`: rtnetlink (rtnetlink(7)) -- delete the neighbour entries traffic
  made, flush the route caches;
* :func:`flush_netfilter`: netfilter netlink -- delete every nftables table, flush conntrack.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct

RTM_DELNEIGH = 29
RTM_GETNEIGH = 30
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NDA_DST = 1
#: Neighbour states a command made (``nud permanent``/``noarp``): not traffic's, kept.
NUD_NOARP_OR_PERMANENT = 0x40 | 0x80


def flush_learned_state() -> int:
    """Delete the neighbour entries traffic made and flush the route caches of the calling
    thread's network namespace; return the neighbour entries deleted.

    A machine no command ran on still learns from traffic: ARP entries for whatever address
    a misconfigured neighbour used (they stay ``STALE`` until the table grows past
    ``gc_thresh1``), and path-MTU exceptions after a too-small MTU elsewhere. Uses one
    rtnetlink socket (rtnetlink(7): ``RTM_GETNEIGH`` dump, ``RTM_DELNEIGH``) and
    ``/proc/sys/net/ipv{4,6}/route/flush``; no process.
    """
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    deleted = 0
    try:
        sock.settimeout(2.0)
        ndmsg = struct.pack("=BxxxiHBB", socket.AF_UNSPEC, 0, 0, 0, 0)
        sock.send(struct.pack("=IHHII", 16 + len(ndmsg), RTM_GETNEIGH,
                              NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + ndmsg)  # fmt: skip
        entries: list[tuple[int, int, bytes]] = []
        done = False
        while not done:
            data = sock.recv(65536)
            offset = 0
            while offset + 16 <= len(data):
                length, kind, _flags, _seq, _pid = struct.unpack_from("=IHHII", data, offset)
                if length < 16:
                    break
                if kind in (NLMSG_DONE, NLMSG_ERROR):
                    done = True
                    break
                family, ifindex, state, _f, _t = struct.unpack_from("=BxxxiHBB", data, offset + 16)
                attr = offset + 28
                while attr + 4 <= offset + length:
                    attr_len, attr_type = struct.unpack_from("=HH", data, attr)
                    if attr_len < 4:
                        break
                    if attr_type == NDA_DST and not state & NUD_NOARP_OR_PERMANENT:
                        entries.append((family, ifindex, data[attr + 4 : attr + attr_len]))
                    attr += (attr_len + 3) & ~3
                offset += (length + 3) & ~3
        for seq, (family, ifindex, dst) in enumerate(entries, start=2):
            body = struct.pack("=BxxxiHBB", family, ifindex, 0, 0, 0)
            body += struct.pack("=HH", 4 + len(dst), NDA_DST) + dst
            body += b"\0" * (-len(body) % 4)
            sock.send(struct.pack("=IHHII", 16 + len(body), RTM_DELNEIGH, NLM_F_REQUEST,
                                  seq, 0) + body)  # fmt: skip
            deleted += 1
    finally:
        sock.close()
    for family in ("ipv4", "ipv6"):
        with contextlib.suppress(OSError):
            with open(f"/proc/sys/net/{family}/route/flush", "wb", buffering=0) as handle:
                handle.write(b"1")
    return deleted



NETLINK_NETFILTER = 12
NFNL_SUBSYS_CTNETLINK = 1
NFNL_SUBSYS_NFTABLES = 10
NFNL_MSG_BATCH_BEGIN = 0x10
NFNL_MSG_BATCH_END = 0x11
NFT_MSG_DELTABLE = 2
IPCTNL_MSG_CT_DELETE = 2
NLM_F_ACK = 0x4


def _nfnl_message(kind: int, flags: int, seq: int, res_id: int = 0) -> bytes:
    """A netfilter netlink message without attributes: ``nlmsghdr`` + ``nfgenmsg`` (family
    ``AF_UNSPEC``: every family; ``res_id`` in network byte order)."""
    body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack("!H", res_id)
    return struct.pack("=IHHII", 16 + len(body), kind, flags, seq, 0) + body


def _nfnl_acks(sock: socket.socket, seqs: set[int]) -> dict[int, int]:
    """Read netlink acknowledgements until every one of ``seqs`` came: seq -> error (0: ok)."""
    acks: dict[int, int] = {}
    while not seqs <= set(acks):
        data = sock.recv(65536)
        offset = 0
        while offset + 16 <= len(data):
            length, kind, _flags, seq, _pid = struct.unpack_from("=IHHII", data, offset)
            if length < 16:
                break
            if kind == NLMSG_ERROR:
                acks[seq] = struct.unpack_from("=i", data, offset + 16)[0]
            offset += (length + 3) & ~3
    return acks


def flush_netfilter() -> list[str]:
    """Delete every nftables table and every connection-tracking entry of the calling
    thread's network namespace; return what failed (empty: done).

    iptables-nft keeps each iptables/ip6tables table as an nftables table, which it cannot
    delete itself: a table an episode created stayed, empty, and showed in the next
    episode's ``iptables-save``. One ``NFT_MSG_DELTABLE`` without a name (what ``nft flush
    ruleset`` sends) deletes them all, in a batch; an ``IPCTNL_MSG_CT_DELETE`` without a
    tuple flushes conntrack, whose entries carry marks rules set (``CONNMARK``). No process.
    A fresh node has no table, so the snapshot's state is none.
    """
    failed = []
    # a kernel without netfilter netlink or nf_tables has no nftables table to delete
    absent = -errno.EOPNOTSUPP
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    except OSError:
        acks = {2: absent, 4: absent}
    else:
        try:
            sock.settimeout(2.0)
            batch = _nfnl_message(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, 1, NFNL_SUBSYS_NFTABLES)
            batch += _nfnl_message((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_DELTABLE,
                                   NLM_F_REQUEST | NLM_F_ACK, 2)  # fmt: skip
            batch += _nfnl_message(NFNL_MSG_BATCH_END, NLM_F_REQUEST, 3, NFNL_SUBSYS_NFTABLES)
            sock.send(batch)
            sock.send(_nfnl_message((NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE,
                                    NLM_F_REQUEST | NLM_F_ACK, 4))  # fmt: skip
            acks = _nfnl_acks(sock, {2, 4})
        finally:
            sock.close()
    if acks[2] and acks[2] != absent:
        failed.append(f"nftables tables not deleted: {os.strerror(-acks[2])}")
    try:
        with open("/proc/thread-self/net/nf_conntrack", "rb") as handle:
            if handle.readline():
                failed.append(f"conntrack entries left ({os.strerror(-acks[4] or 0)})")
    except FileNotFoundError:
        pass  # no connection tracking in this kernel
    return failed

