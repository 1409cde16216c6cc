# A FUSE file system for secret_files.rs, spoken over /dev/fuse without libfuse: a home whose
# directory listing disagrees with its lookups, as on a case-insensitive, FUSE or network file
# system. Usage: listing_fuse.py MOUNTPOINT (as root). The home holds .ssh/id ("KEY"),
# .config/gcloud/c and cfg/gcloud/c ("TOKEN"), owned by uid 65534.
# ERR=N: listing the home stops with errno N after ".", ".." and ".ssh" (2, ENOENT, is taken
#        for the end of the directory; 5, EIO, for an error); AT=2: before ".ssh".
# HIDE=NAME: listing the home leaves NAME out; looking it up still finds it.
# CASE=1: case-insensitive, as a vfat or casefolded ext4 directory: ".ssh" is stored as ".SSH"
#         and a lookup of any case finds it.
# (After attacks on the secrets step found these, 2026-12-07 and 2026-12-08.)
import ctypes, errno, os, struct, sys

ERR, HIDE = int(os.environ.get("ERR", "0")), os.environ.get("HIDE", "").encode()
AT, CASE = int(os.environ.get("AT", "3")), os.environ.get("CASE") == "1"
SSH = b".SSH" if CASE else b".ssh"
# inode: (parent, {name: inode}) for a directory, bytes for a file.
T = {1: (1, {SSH: 2, b".config": 3, b"cfg": 6}), 2: (1, {b"id": 4}), 3: (1, {b"gcloud": 7}),
     7: (3, {b"c": 5}), 6: (1, {b"gcloud": 8}), 8: (6, {b"c": 5}), 4: b"KEY\n", 5: b"TOKEN\n"}


def find(node, name):
    if not isinstance(T[node], tuple):
        return None
    for k, v in T[node][1].items():
        if k == name or (CASE and k.lower() == name.lower()):
            return v
    return None


def attr(i):
    d = isinstance(T[i], tuple)
    size = 4096 if d else len(T[i])
    mode = 0o40755 if d else 0o100644
    return struct.pack("<6Q3I7I", i, size, 8, 0, 0, 0, 0, 0, 0, mode, 2 if d else 1,
                       65534, 65534, 0, 4096, 0)


fd = os.open("/dev/fuse", os.O_RDWR)
opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other,default_permissions"
if ctypes.CDLL(None).mount(b"fz", sys.argv[1].encode(), b"fuse.fz", 0, opts.encode()) != 0:
    sys.exit(f"mount: {os.strerror(ctypes.get_errno())}")


def reply(unique, err=0, payload=b""):
    os.write(fd, struct.pack("<IiQ", 16 + len(payload), -err, unique) + payload)


while True:
    try:
        req = os.read(fd, 1 << 18)
    except OSError as e:
        if e.errno == errno.ENODEV:  # unmounted
            break
        continue
    length, op, unique, node = struct.unpack_from("<IIQQ", req)
    body = req[40:length]
    if op == 26:  # INIT
        reply(unique, 0, struct.pack("<IIIIHHIIHHII", 7, 31, 0, 0, 16, 12, 65536, 1, 0, 0, 0, 0)
              + bytes(24))
    elif op == 1:  # LOOKUP
        child = find(node, body.split(b"\0")[0])
        if child is None:
            reply(unique, errno.ENOENT)
        else:
            reply(unique, 0, struct.pack("<QQQQII", child, 0, 0, 0, 0, 0) + attr(child))
    elif op in (2, 36, 42):  # FORGET, INTERRUPT, BATCH_FORGET: no reply
        pass
    elif op == 3:  # GETATTR
        reply(unique, 0, struct.pack("<QII", 0, 0, 0) + attr(node))
    elif op in (14, 27):  # OPEN, OPENDIR
        reply(unique, 0, bytes(16))
    elif op == 15:  # READ
        offset, size = struct.unpack_from("<QI", body, 8)
        reply(unique, 0, T[node][offset:offset + size])
    elif op == 28:  # READDIR
        offset = struct.unpack_from("<Q", body, 8)[0]
        entries = [(b".", node), (b"..", T[node][0])]
        entries += [(k, v) for k, v in T[node][1].items() if k != HIDE]
        cut = node == 1 and ERR
        if cut and offset >= AT:
            reply(unique, ERR)
            continue
        out = b""
        for i, (name, child) in enumerate(entries):
            if i < offset or (cut and i >= AT):
                continue
            kind = 4 if isinstance(T[child], tuple) else 8
            out += struct.pack("<QQII", child, i + 1, len(name), kind) + name
            out += bytes((8 - (24 + len(name)) % 8) % 8)
        reply(unique, 0, out)
    elif op == 38:  # DESTROY
        reply(unique)
        break
    elif op in (18, 25, 29, 34):  # RELEASE, FLUSH, RELEASEDIR, ACCESS
        reply(unique)
    else:
        reply(unique, errno.ENOSYS)
