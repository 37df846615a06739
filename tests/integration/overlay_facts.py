# overlay_facts.py — the facts of sandbox/WALLS.md "Changesets: an overlay on a sized tmpfs",
# established by hand (not part of the suite), run as root inside a runsc container as WALLS.md
# shows: `python3 overlay_facts.py` for (a)-(d), `python3 overlay_facts.py memory` for (e) and exec.
import sys
if len(sys.argv) < 2:
    import os, errno, stat, ctypes, sys
    libc = ctypes.CDLL(None, use_errno=True)
    def mount(src, tgt, fs, data):
        r = libc.mount(src.encode(), tgt.encode(), fs.encode(), 0, data.encode())
        return 0 if r == 0 else ctypes.get_errno()
    print("== mounts"); print(open('/proc/self/mounts').read())
    # (a) size
    try:
        with open('/jailbox-cs/fill', 'wb') as f:
            n = 0
            while n < 64*1024*1024:
                f.write(b'\0'*1048576); f.flush(); os.fsync(f.fileno()); n += 1048576
        print("(a) wrote 64 MiB without error")
    except OSError as e:
        print("(a) error after %d MiB: %s" % (n>>20, errno.errorcode[e.errno]))
    os.unlink('/jailbox-cs/fill')
    st = os.statvfs('/jailbox-cs'); print("(a) statvfs blocks", st.f_blocks*st.f_frsize)
    # (b) overlay
    b = '/jailbox-cs/t1'
    for d in ('upper', 'work', 'merged'): os.makedirs(b + '/' + d)
    rc = mount('overlay', b + '/merged', 'overlay', 'lowerdir=/workspace,upperdir=%s/upper,workdir=%s/work' % (b, b))
    print("(b) mount rc", rc, os.strerror(rc) if rc else "")
    if rc: sys.exit(0)
    m = b + '/merged'
    print("(b) merged lists", sorted(os.listdir(m)))
    # (c)
    os.unlink(m + '/gone')
    import shutil
    shutil.rmtree(m + '/d'); os.mkdir(m + '/d'); open(m + '/d/new', 'w').write('n\n')
    os.chmod(m + '/modme', 0o600)
    open(m + '/newfile', 'w').write('hello\n')
    try:
        os.rename(m + '/lowerdir', m + '/newname'); print("(c) rename lower dir: ok")
    except OSError as e:
        print("(c) rename lower dir:", errno.errorcode[e.errno])
    os.symlink('target/x', m + '/lnk')
    open(m + '/newname/y', 'a').write('more\n')
    def walk(p, rel=''):
        for n in sorted(os.listdir(p)):
            fp = p + '/' + n; st = os.lstat(fp); r = rel + '/' + n
            x = []
            try: x = os.listxattr(fp, follow_symlinks=False)
            except OSError as e: x = ['listxattr:' + errno.errorcode[e.errno]]
            try: op = os.getxattr(fp, 'trusted.overlay.opaque', follow_symlinks=False)
            except OSError as e: op = errno.errorcode[e.errno]
            dev = ' rdev=%d:%d' % (os.major(st.st_rdev), os.minor(st.st_rdev)) if stat.S_ISCHR(st.st_mode) else ''
            print('  %s %s %o size=%d%s xattrs=%s opaque=%s' % (r, stat.filemode(st.st_mode), st.st_mode & 0o7777, st.st_size, dev, x, op))
            if stat.S_ISDIR(st.st_mode): walk(fp, r)
    print("(c) upper:"); walk(b + '/upper')
    print("(c) merged:", sorted(os.listdir(m)), sorted(os.listdir(m + '/d')))
    # user.* xattr on tmpfs?
    try:
        os.setxattr(b + '/upper/newfile', 'trusted.test', b'1'); print("(c) setxattr trusted on tmpfs ok", os.getxattr(b+'/upper/newfile','trusted.test'))
    except OSError as e: print("(c) setxattr trusted on tmpfs:", errno.errorcode[e.errno])
    try:
        os.mknod(b + '/hand-wh', stat.S_IFCHR | 0o600, os.makedev(0, 0)); print("(c) mknod 0:0 on tmpfs ok")
    except OSError as e: print("(c) mknod 0:0:", errno.errorcode[e.errno])
    # umount
    rc = libc.umount2((m).encode(), 0); print("umount rc", rc, ctypes.get_errno())
    print("(c) after umount, lower:", sorted(os.listdir('/workspace')))
    # remount to see the renamed dir from upper
    for d in ('upper','work','merged'): pass
    rc = mount('overlay', m, 'overlay', 'lowerdir=/workspace,upperdir=%s/upper,workdir=%s/work' % (b, b))
    print("remount rc", rc, sorted(os.listdir(m)), sorted(os.listdir(m+'/newname')), sorted(os.listdir(m+'/newname/sub')) if os.path.isdir(m+'/newname/sub') else '')
else:
    import os, errno, ctypes, subprocess
    libc = ctypes.CDLL(None, use_errno=True)
    b='/jailbox-cs/t1'
    for d in ('upper','work','merged'): os.makedirs(b+'/'+d)
    print("mount", libc.mount(b"overlay", (b+'/merged').encode(), b"overlay", 0, ('lowerdir=/workspace,upperdir=%s/upper,workdir=%s/work'%(b,b)).encode()))
    m=b+'/merged'
    open(m+'/s.sh','w').write('#!/bin/sh\necho ran-from-merged\n'); os.chmod(m+'/s.sh',0o755)
    try: print(subprocess.run([m+'/s.sh'],capture_output=True,text=True).stdout.strip())
    except OSError as e: print("exec in merged:", errno.errorcode[e.errno])
    # jail via bwrap: bind merged as /workspace, run as 65534
    r = subprocess.run(['bwrap','--ro-bind','/usr','/usr','--symlink','usr/bin','/bin','--symlink','usr/lib','/lib','--symlink','usr/lib64','/lib64','--bind',m,'/workspace','--proc','/proc','--dev','/dev','--unshare-pid','--chdir','/workspace','/bin/sh','-c','ls /; ls /jailbox-cs 2>&1; echo hi > /workspace/fromjail; ./s.sh; id -u'],capture_output=True,text=True)
    print("bwrap rc", r.returncode, r.stdout, r.stderr)
    print("upper now", sorted(os.listdir(b+'/upper')))
    def meminfo():
        d = {}
        for l in open('/proc/meminfo'):
            k, v = l.split(':'); d[k] = v.strip()
        return d['MemTotal'], d['MemFree'], d.get('Shmem')
    print("meminfo before", meminfo())
    n=0
    try:
        with open(m+'/big','wb') as f:
            while n < 400:
                f.write(os.urandom(1<<20)); n+=1
                if n % 100 == 0: print(" wrote", n, "MiB", meminfo(), flush=True)
        print("wrote 400 MiB")
    except OSError as e: print("big write error after", n, errno.errorcode[e.errno])
