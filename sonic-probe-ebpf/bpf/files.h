/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Which descriptor is which file. openat's exit enters the new descriptor
 * in open_files with its inode type and, for regular files, the class of
 * its path's extension (file_classes), for GPU device nodes the gpu class;
 * close reports what was read through it and marks its entry closed (below)
 * for the number's next descriptor to take over; the first call
 * on a descriptor we did not see opened (a row with fd_use Read or
 * Classify) enters it with its inode type only. Calls then cost one lookup
 * to know whether they read a model file, an audio file, a pipe, a socket
 * or talk to a GPU; for what is not a regular file (most reads of a
 * server: its sockets and pipes) an array index in fd_class_cache instead
 * (below).
 *
 * Not seen: descriptors made by dup/dup2/fcntl, inherited across exec or
 * from before attach keep their inode type but no path; close_range() and
 * close-on-exec are not seen as closes (the daemon purges a process's
 * entries when it execs or exits).
 */
#pragma once

/* Reads the path argument into the thread state, if it was not read yet
 * (sys_enter marks it unread). At exit, not at entry: the kernel has
 * faulted its page in (a BPF program can't, and a string in memory not
 * touched yet is unreadable at entry), and an open counted in reopens
 * (below) never reads it. */
static __always_inline void read_path_once(struct thread_state *st, __u64 uptr)
{
	if (!(st->path_flags & SP_EMIT_PATH_UNREADABLE))
		return; /* read (unreadable ones are tried again) */
	long n = bpf_probe_read_user_str(st->path, sizeof(st->path), (const void *)uptr);

	if (n <= 0) {
		st->path[0] = 0;
		st->path_flags = SP_EMIT_PATH_UNREADABLE;
		st->path_len = 0;
	} else {
		st->path_len = n - 1;
		st->path_flags = n == sizeof(st->path) ? SP_EMIT_PATH_TRUNCATED : 0;
	}
}

/* The socket address a call was given (connect's), its bytes as they are
 * (the daemon decodes the family's layout): at most SP_SOCKADDR_CAP, a
 * sockaddr_un's size; unreadable ones are flagged as paths are. */
#define SP_SOCKADDR_CAP 112
_Static_assert(SP_SOCKADDR_CAP <= SP_PATH_CAP, "an address fits the path buffer");
static __always_inline void read_sockaddr(struct thread_state *st, __u64 uptr, __u64 len)
{
	__u32 n = len < SP_SOCKADDR_CAP ? len : SP_SOCKADDR_CAP;

	if (n && !bpf_probe_read_user(st->path, n, (const void *)uptr)) {
		st->path_len = n;
		st->path_flags = 0;
	} else {
		st->path_len = 0;
		st->path_flags = SP_EMIT_PATH_UNREADABLE;
	}
}

/* How much of struct inode one read takes: i_mode, i_sb, i_ino and i_rdev
 * lie within its first 80 bytes on the kernels we know. Not more: the
 * buffer is on sys_exit's stack, which 6.1's verifier finds at its limit
 * (512 bytes with the bpf_loop callback's frame; tests/stack_budget.rs
 * checks every program's frame). */
#define SP_INODE_HEAD 88

/* An inode's type, number and device (and what a device node stands for):
 * one read of the inode's head, the fields taken at the running kernel's
 * offsets (CO-RE), then the superblock's s_dev: two helper calls instead
 * of one per field (each costs tens of ns where helper calls go through a
 * retpoline). A kernel whose layout puts a field past the head reads them
 * one by one. */
static __always_inline bool inode_facts(struct inode *inode, struct open_file *out, __u32 *rdev)
{
	__u32 mode_at = bpf_core_field_offset(struct inode, i_mode);
	__u32 sb_at = bpf_core_field_offset(struct inode, i_sb);
	__u32 ino_at = bpf_core_field_offset(struct inode, i_ino);
	__u32 rdev_at = bpf_core_field_offset(struct inode, i_rdev);
	struct super_block *sb = NULL;

	if (mode_at <= SP_INODE_HEAD - sizeof(__u16) && sb_at <= SP_INODE_HEAD - sizeof(sb) &&
	    ino_at <= SP_INODE_HEAD - sizeof(__u64) && rdev_at <= SP_INODE_HEAD - sizeof(__u32)) {
		__u8 head[SP_INODE_HEAD];
		__u16 mode;
		__u64 ino;
		__u32 r;

		if (bpf_probe_read_kernel(head, sizeof(head), inode))
			return false;
		__builtin_memcpy(&mode, head + mode_at, sizeof(mode));
		__builtin_memcpy(&sb, head + sb_at, sizeof(sb));
		__builtin_memcpy(&ino, head + ino_at, sizeof(ino));
		__builtin_memcpy(&r, head + rdev_at, sizeof(r));
		out->mode = mode;
		out->ino = ino;
		*rdev = S_ISCHR(mode) ? r : 0;
	} else {
		out->mode = BPF_CORE_READ(inode, i_mode);
		out->ino = BPF_CORE_READ(inode, i_ino);
		sb = BPF_CORE_READ(inode, i_sb);
		*rdev = S_ISCHR(out->mode) ? BPF_CORE_READ(inode, i_rdev) : 0;
	}
	out->dev = sb ? BPF_CORE_READ(sb, s_dev) : 0;
	return true;
}

/* The current task's descriptor table, for fd_inode. In the fast variant
 * (a plain load) a program reads it where the verifier's paths through it
 * are few, sys_exit at its start: each load of a pointer from the task is
 * a search of the kernel's BTF for the verifier (6.x), on every path that
 * reaches the load. The fallback's reads are helper calls, without that
 * search: fd_inode reads it there, only when it is needed. */
#if SP_TASK_BTF
#define TASK_FILES(task) KREAD(task, files)
#else
#define TASK_FILES(task) ((struct files_struct *)0)
#endif

/* Fills the inode type, device and number of a process's descriptor;
 * returns false (leaving them 0) if it is not open. *rdev: the device a
 * character device node stands for, else 0. files: TASK_FILES(task). */
static __always_inline bool fd_inode(struct task_struct *task, struct files_struct *files, __u32 fd,
				     struct open_file *out, __u32 *rdev)
{
	/* Direct loads through the task's BTF pointers where the kernel gives
	 * us one, no helper calls (variant.h). */
#if !SP_TASK_BTF
	files = KREAD(task, files);
#endif
	if (!files)
		return false;
	struct fdtable *fdt = KREAD(files, fdt);
	if (!fdt || fd >= KREAD(fdt, max_fds))
		return false;
	struct file **fds = KREAD(fdt, fd);
	struct file *f = NULL;
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return false;
	struct inode *inode = BPF_CORE_READ(f, f_inode);
	if (!inode)
		return false;
	return inode_facts(inode, out, rdev);
}

/* The class of what is not a regular file: a GPU if it is a character
 * device of a driver in probe_config.gpu_majors. */
static __always_inline __u16 class_of_device(const struct probe_config *cfg, __u32 rdev)
{
	__u32 major = rdev >> 20; /* the kernel's dev_t: MINORBITS 20 */

	if (!rdev)
		return SP_FILE_CLASS_NOT_FILE;
	for (int i = 0; i < SP_MAX_GPU_MAJORS; i++)
		if (cfg->gpu_majors[i] && cfg->gpu_majors[i] == major)
			return SP_FILE_CLASS_GPU;
	return SP_FILE_CLASS_NOT_FILE;
}

/* FILE_CLASS_* of the path captured at openat entry, by its extension. */
static __always_inline __u16 class_of_path(const struct thread_state *st)
{
	__u32 len = st->path_len;
	if (len == 0 || len >= SP_PATH_CAP || (st->path_flags & SP_EMIT_PATH_TRUNCATED))
		return SP_FILE_CLASS_OTHER;

	__u32 dot = 0;
	for (__u32 i = 1; i < SP_EXT_LEN; i++) {
		if (i > len)
			break;
		char c = st->path[(len - i) & (SP_PATH_CAP - 1)];
		if (c == '/')
			break;
		if (c == '.') {
			dot = len - i + 1;
			break;
		}
	}
	if (!dot || dot >= len)
		return SP_FILE_CLASS_OTHER;

	struct ext_key key = {};
	for (__u32 j = 0; j < SP_EXT_LEN - 1; j++) {
		__u32 pos = dot + j;
		if (pos >= len)
			break;
		char c = st->path[pos & (SP_PATH_CAP - 1)];
		if (c >= 'A' && c <= 'Z')
			c += 'a' - 'A';
		key.ext[j] = c;
	}
	__u32 *cls = bpf_map_lookup_elem(&file_classes, &key);
	return cls ? (__u16)*cls : SP_FILE_CLASS_OTHER;
}

/* ---- fd_class_cache (maps.h)
 *
 * A slot holds one descriptor that is not a regular file, as one 64-bit
 * word, so that a load or a store of it is never torn between CPUs:
 *   bits  0-21  the process (tgid; below 2^22, the kernel's PID_MAX_LIMIT)
 *   bits 22-35  the descriptor (below FD_CLASS_CACHE_MAX_FD)
 *   bits 36-55  the generation it was entered in (fd_class_generation)
 *   bits 56-59  its FILE_CLASS_*
 *   bits 60-63  its inode type (i_mode >> 12)
 * It is entered from open_files (or at openat), so it knows no more than
 * open_files did; close and openat clear it; a process that exec'd or
 * exited makes the daemon start a new generation (the sweep that deletes
 * its open_files entries), so a slot is never staler than open_files.
 * Regular files are not kept: their reads are counted in their open_files
 * entry anyway. */
#define SP_FDC_ID_BITS 36
#define SP_FDC_ID_MASK ((1ull << SP_FDC_ID_BITS) - 1)
#define SP_FDC_GEN_MASK ((1ull << 20) - 1)
#define SP_FDC_CLASS_SHIFT 56
#define SP_FDC_TYPE_SHIFT 60

static __always_inline bool fdc_keeps(__u32 tgid, __u32 fd)
{
	return tgid && tgid < (1u << 22) && fd < SP_FD_CLASS_CACHE_MAX_FD;
}

static __always_inline __u64 fdc_id(__u32 tgid, __u32 fd)
{
	return (__u64)tgid | ((__u64)fd << 22);
}

static __always_inline __u64 *fdc_slot(__u32 tgid, __u32 fd)
{
	__u32 h = (tgid * 0x9E3779B1u) ^ (fd * 0x85EBCA6Bu);

	h ^= h >> 16;
	__u32 i = h & (SP_FD_CLASS_CACHE_SLOTS - 1);
	return bpf_map_lookup_elem(&fd_class_cache, &i);
}

/* The current generation of fd_class_cache's slots. */
static __always_inline __u64 fdc_generation(void)
{
	__u32 zero = 0;
	__u64 *g = bpf_map_lookup_elem(&fd_class_generation, &zero);

	return g ? (*(volatile __u64 *)g & SP_FDC_GEN_MASK) : 0;
}

/* The class and inode type of descriptor fd of process tgid if the cache
 * has it (of generation gen). */
static __always_inline bool fd_class_cached(__u32 tgid, __u32 fd, __u64 gen, __u16 *class, __u16 *mode)
{
	if (!fdc_keeps(tgid, fd))
		return false;
	__u64 *slot = fdc_slot(tgid, fd);
	if (!slot)
		return false;
	__u64 v = *(volatile __u64 *)slot;
	if ((v & SP_FDC_ID_MASK) != fdc_id(tgid, fd) || ((v >> SP_FDC_ID_BITS) & SP_FDC_GEN_MASK) != gen)
		return false;
	*class = (v >> SP_FDC_CLASS_SHIFT) & 0xf;
	*mode = ((v >> SP_FDC_TYPE_SHIFT) & 0xf) << 12;
	return true;
}

/* Keeps what of is (if it is not a regular file), or forgets the slot's
 * descriptor if it is this one. */
static __always_inline void fd_class_note(__u32 tgid, __u32 fd, __u64 gen, const struct open_file *of)
{
	if (!fdc_keeps(tgid, fd))
		return;
	__u64 *slot = fdc_slot(tgid, fd);
	if (!slot)
		return;
	__u64 id = fdc_id(tgid, fd);
	if (of && !S_ISREG(of->mode) && of->class < 16)
		*(volatile __u64 *)slot = id | (gen << SP_FDC_ID_BITS) | ((__u64)of->class << SP_FDC_CLASS_SHIFT) |
					  ((__u64)((of->mode >> 12) & 0xf) << SP_FDC_TYPE_SHIFT);
	else if ((*(volatile __u64 *)slot & SP_FDC_ID_MASK) == id)
		*(volatile __u64 *)slot = 0;
}

/* ---- closed entries
 *
 * A close does not delete its descriptor's entry: it marks it closed (mode
 * 0; an open descriptor's inode has a type or permission bits) with its
 * counts zeroed, and the next descriptor the process gets with that number
 * (the lowest free one, so soon) takes the entry over in place. A delete
 * and an insert each take a bucket lock and the element free list: ≈ 400
 * ns per openat+close pair on the bench's machine, against a store here.
 * The entries of a process go when it execs or exits (the daemon's sweep),
 * so a process holds at most as many as the most descriptors it had open
 * at once. An entry the daemon reads with opened_ns 0 (a closed one
 * included) is not an open it saw. */
static __always_inline bool file_is_open(const struct open_file *of)
{
	return of->mode != 0;
}

static __always_inline void file_closed(struct open_file *of)
{
	*of = (struct open_file){};
}

/* ---- reopens (maps.h)
 *
 * A service that opens its model file on every request, or polls a file,
 * opens one file over and over; each open sent with its path costs the
 * call a path read and an event (≈ 60 ns of the ≈ 230 an openat+close
 * pair costs on the bench's machine). So a read-only open of a regular
 * file within probe_config.reopen_coalesce_ns of the last sent open of
 * that file (same process, same program image) is only counted in the
 * file's reopens entry, with its time; the next sent open carries the
 * entry's total (SyscallEvent.aux), and the daemon's sweep reads the
 * entries for the opens counted since. Totals only grow, so the daemon
 * takes differences and nothing is counted twice or lost when an event
 * and the sweep cross. What is not counted this way is sent as before:
 * opens for writing, of other files, slow ones, traced ones, and all of
 * them when the map is full.
 *
 * Most files a process opens it opens once (a program's start-up, a
 * shell's commands on a busy node): an entry each would cost an
 * allocation per open and the daemon's sweep a read per entry. So a file's
 * first open only notes it in reopen_seen (an array slot by hash, no
 * allocation) and is sent without a total (it counts one); an open that
 * finds its note there younger than the window makes the entry. A hash
 * collision makes one early, which costs nothing but the entry. */
#define SP_O_ACCMODE 3
#define SP_O_RDONLY 0

/* Whether the file of key was opened within the window before now (its
 * note in reopen_seen); notes this open either way. */
static __always_inline bool reopen_seen_lately(const struct probe_config *cfg, const struct reopen_key *key,
					       __u64 now)
{
	/* Not of mm (a pointer to the verifier): a program exec'd finds its
	 * predecessor's note at worst, and makes an entry early. */
	__u32 h = (key->tgid * 0x9E3779B1u) ^ ((__u32)key->ino * 0x85EBCA6Bu) ^ ((__u32)(key->ino >> 32) * 0xC2B2AE35u) ^
		  (key->dev * 0x27D4EB2Fu);
	h ^= h >> 15;
	__u32 i = h & (SP_REOPEN_SEEN_SLOTS - 1);
	__u64 *slot = bpf_map_lookup_elem(&reopen_seen, &i);
	if (!slot)
		return false;
	__u32 now_ms = now / 1000000;
	__u64 v = *(volatile __u64 *)slot;
	*(volatile __u64 *)slot = ((__u64)h << 32) | now_ms;
	return (__u32)(v >> 32) == h && (__u64)(now_ms - (__u32)v) * 1000000 < cfg->reopen_coalesce_ns;
}

/* An open of regular file *of (its dev and ino filled in): true if it is
 * counted in its reopens entry, not sent (of->class then the entry's);
 * else its path is read and classed, and if may_count its entry notes it
 * as sent (st->aux: AUX_OPEN_TOTAL). */
static __always_inline bool reopen_counted(const struct probe_config *cfg, struct task_struct *task, __u32 tgid,
					   struct thread_state *st, __u64 path_uptr, bool may_count,
					   struct open_file *of)
{
	struct reopen_key key = { .tgid = tgid, .dev = of->dev, .ino = of->ino, .mm = (__u64)KREAD(task, mm) };
	struct reopens *r = NULL;
	__u64 now = st->start_ns;

	if (may_count) {
		r = bpf_map_lookup_elem(&reopens, &key);
		/* now < sent_ns (another thread's later open): sent. */
		if (r && now - r->sent_ns < cfg->reopen_coalesce_ns) {
			__sync_fetch_and_add(&r->opens, 1);
			r->last_ns = now;
			of->class = r->class;
			return true;
		}
	}
	read_path_once(st, path_uptr);
	of->class = class_of_path(st);
	if (!may_count)
		return false;
	if (!r) {
		/* A first open (lately): noted, sent alone. */
		if (!reopen_seen_lately(cfg, &key, now))
			return false;
		__u32 zero_idx = 0;
		/* Any all-zero value of at least its size. */
		void *zero = bpf_map_lookup_elem(&zero_stats, &zero_idx);
		if (!zero)
			return false;
		bpf_map_update_elem(&reopens, &key, zero, BPF_NOEXIST);
		r = bpf_map_lookup_elem(&reopens, &key); /* full: sent alone */
		if (!r)
			return false;
		if (!r->created_ns)
			r->created_ns = now;
	}
	r->class = of->class;
	__sync_fetch_and_add(&r->opens, 1);
	r->sent_ns = now;
	r->last_ns = now;
	/* Another thread's open may be in the total too: it only grows. */
	st->aux[0] = r->opens;
	st->aux[1] = r->created_ns;
	st->aux_kind = SP_AUX_OPEN_TOTAL;
	return false;
}

/* openat returned fd: enter it. True if the open is counted in reopens
 * and not to be sent (reopen_counted). */
static __always_inline bool track_open(const struct probe_config *cfg, struct task_struct *task,
				       struct files_struct *files, __u32 tgid, __u32 fd, struct thread_state *st,
				       __u64 path_uptr, bool may_count, struct open_file *out)
{
	struct file_key key = { .tgid = tgid, .fd = fd };
	__u32 rdev = 0;
	bool counted = false;

	out->opened_ns = st->start_ns;
	fd_inode(task, files, fd, out, &rdev);
	if (S_ISREG(out->mode))
		counted = reopen_counted(cfg, task, tgid, st, path_uptr, may_count, out);
	else
		out->class = class_of_device(cfg, rdev);
	/* The number's entry, closed or (closed unseen: exec, close_range) not. */
	struct open_file *cur = bpf_map_lookup_elem(&open_files, &key);
	if (cur)
		*cur = *out;
	else if (bpf_map_update_elem(&open_files, &key, out, BPF_ANY))
		count(SP_COUNTER_DROP_OPEN_FILES);
	/* The number may have been another descriptor's (closed by exec or
	 * close_range, unseen). */
	fd_class_note(tgid, fd, fdc_generation(), out);
	return counted;
}

/* The entry of a descriptor, entered now if this is its first sight.
 * files: TASK_FILES(task). */
static __always_inline struct open_file *lookup_fd(const struct probe_config *cfg, struct task_struct *task,
						   struct files_struct *files, __u32 tgid, __u32 fd)
{
	struct file_key key = { .tgid = tgid, .fd = fd };
	struct open_file *of = bpf_map_lookup_elem(&open_files, &key);

	if (of && file_is_open(of))
		return of;
	struct open_file fresh = {};
	__u32 rdev = 0;
	if (!fd_inode(task, files, fd, &fresh, &rdev))
		return NULL;
	fresh.class = S_ISREG(fresh.mode) ? SP_FILE_CLASS_OTHER : class_of_device(cfg, rdev);
	if (of) {
		/* A closed descriptor's entry, its number open again (not by an
		 * openat: a socket, a pipe, a dup): its counts are zero. Threads
		 * that get here at once write the same. */
		of->class = fresh.class;
		of->dev = fresh.dev;
		of->ino = fresh.ino;
		of->mode = fresh.mode;
		return of;
	}
	if (bpf_map_update_elem(&open_files, &key, &fresh, BPF_NOEXIST)) {
		of = bpf_map_lookup_elem(&open_files, &key); /* another thread was first? */
		if (!of)
			count(SP_COUNTER_DROP_OPEN_FILES);
		return of;
	}
	return bpf_map_lookup_elem(&open_files, &key);
}

/* A read of `requested` bytes through `of` (a regular file's entry: the
 * caller checked) returned `ret`. */
static __always_inline void account_read(struct open_file *of, __u64 requested, long ret,
					 const struct probe_config *cfg)
{
	if (ret < 0)
		return;
	__sync_fetch_and_add(&of->reads, 1);
	__sync_fetch_and_add(&of->read_bytes, ret);
	if (requested < cfg->small_size) {
		__sync_fetch_and_add(&of->small_reads, 1);
		__sync_fetch_and_add(&of->small_read_requested, requested);
		__sync_fetch_and_add(&of->small_read_bytes, ret);
	}
}
