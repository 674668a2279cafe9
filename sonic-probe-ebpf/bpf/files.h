/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Which descriptor is which file. openat's exit enters the new descriptor
 * in open_files with its inode type and, for regular files, the class of
 * its path's extension (file_classes); close removes it (and reports what
 * was read through it); the first read of a descriptor we did not see
 * opened enters it with its inode type only. Reads then cost one lookup to
 * know whether they read a model file, an audio file, a pipe or a socket.
 *
 * Not seen: descriptors made by dup/dup2/fcntl, inherited across exec or
 * from before attach keep their inode type but no path; close_range() and
 * close-on-exec are not seen as closes (the daemon purges a process's
 * entries when it execs or exits).
 */
#pragma once

/* Fills the inode type, device and number of a process's descriptor;
 * returns false (leaving them 0) if it is not open. */
static __always_inline bool fd_inode(struct task_struct *task, __u32 fd, struct open_file *out)
{
	/* Direct loads through the task's BTF pointers, no helper calls. */
	struct files_struct *files = task->files;
	if (!files)
		return false;
	struct fdtable *fdt = files->fdt;
	if (!fdt || fd >= fdt->max_fds)
		return false;
	struct file **fds = fdt->fd;
	struct file *f = NULL;
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return false;
	struct inode *inode = BPF_CORE_READ(f, f_inode);
	if (!inode)
		return false;
	out->mode = BPF_CORE_READ(inode, i_mode);
	out->ino = BPF_CORE_READ(inode, i_ino);
	out->dev = BPF_CORE_READ(inode, i_sb, s_dev);
	return true;
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

/* openat returned fd: enter it. */
static __always_inline void track_open(struct task_struct *task, __u32 tgid, __u32 fd,
				       const struct thread_state *st, struct open_file *out)
{
	struct file_key key = { .tgid = tgid, .fd = fd };

	out->opened_ns = st->start_ns;
	fd_inode(task, fd, out);
	out->class = S_ISREG(out->mode) ? class_of_path(st) : SP_FILE_CLASS_NOT_FILE;
	if (bpf_map_update_elem(&open_files, &key, out, BPF_ANY))
		count(SP_COUNTER_DROP_OPEN_FILES);
}

/* The entry of a descriptor, entered now if this is its first sight. */
static __always_inline struct open_file *lookup_fd(struct task_struct *task, __u32 tgid, __u32 fd)
{
	struct file_key key = { .tgid = tgid, .fd = fd };
	struct open_file *of = bpf_map_lookup_elem(&open_files, &key);

	if (of)
		return of;
	struct open_file fresh = {};
	if (!fd_inode(task, fd, &fresh))
		return NULL;
	fresh.class = S_ISREG(fresh.mode) ? SP_FILE_CLASS_OTHER : SP_FILE_CLASS_NOT_FILE;
	if (bpf_map_update_elem(&open_files, &key, &fresh, BPF_NOEXIST)) {
		of = bpf_map_lookup_elem(&open_files, &key); /* another thread was first? */
		if (!of)
			count(SP_COUNTER_DROP_OPEN_FILES);
		return of;
	}
	return bpf_map_lookup_elem(&open_files, &key);
}

/* A read of `requested` bytes through `of` returned `ret`. */
static __always_inline void account_read(struct open_file *of, __u64 requested, long ret,
					 const struct probe_config *cfg)
{
	if (ret < 0 || !S_ISREG(of->mode))
		return;
	__sync_fetch_and_add(&of->reads, 1);
	__sync_fetch_and_add(&of->read_bytes, ret);
	if (requested < cfg->small_size) {
		__sync_fetch_and_add(&of->small_reads, 1);
		__sync_fetch_and_add(&of->small_read_requested, requested);
		__sync_fetch_and_add(&of->small_read_bytes, ret);
	}
}
