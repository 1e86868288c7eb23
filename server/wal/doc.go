// Package wal is the server's write-ahead log: one append-only log per
// server for everything that must be durable before an ack, written with
// group commit so that one fdatasync covers every record appended while
// the previous batch was syncing, whatever the number of sessions.
//
// # Guarantees
//
// [Log.Append] returns once its record is written and fdatasynced (unless
// [Options.NoSync]). Records get consecutive log sequence numbers ([LSN])
// starting at 1, in the order Append took them. One writer goroutine takes
// everything queued, writes it with one write call and syncs it once;
// while it syncs, the next batch fills (pipelining), so an Append waits
// for at most one sync it is not part of, and fsync costs latency once,
// not throughput.
//
// A failed write or fsync fails that batch and every Append after it
// (errors.Is(err, [ErrFailed])) until the log is reopened. An fsync error
// is not retried: on Linux a failed fsync may have dropped the dirty pages
// and cleared the error, so a retry can report success for data that never
// reached the disk (the 2018 "fsyncgate" lesson from PostgreSQL). Reopening
// re-reads what is really on disk.
//
// # What it does not do
//
// A cancelled Append returns ctx.Err() at once, but its record may still
// be written: the caller must treat it as "maybe logged", and so an
// Append that failed with ErrFailed, whose write may have reached the disk
// and replays after reopening. Replay hands records to the caller but does
// not know what they mean; the caller's apply must be idempotent, because
// the release mark (see below) is written without fsync and a crash can
// replay records already applied.
// The log does not compress, encrypt or index records.
//
// # On disk
//
// The log is a directory of segments named by the LSN of their first
// record, "%016x.wal". A segment is a sequence of frames, little-endian:
//
//	0:4    payload length n
//	4:12   LSN
//	12:16  batch offset: LSN minus the LSN of the first record of the same write
//	16:20  CRC-32C (Castagnoli) of the payload
//	20:24  CRC-32C of bytes 0:20
//	24:24+n payload
//
// Every write ends with an end marker, a zeroed header (no frame has one:
// its header CRC is not zero), which the next write overwrites. A batch
// (one write) never spans segments, so no record does either: a new
// segment is cut before a batch that would take the current one over
// [Options.SegmentBytes]. [Log.Release] records that everything up to an
// LSN is applied elsewhere and retires the segments wholly below it; the
// mark goes to the file "released" (atomic rename, no fsync), and Open
// replays only records after it.
//
// Retired segments are recycled (recycle.go): up to two are kept as
// "%016x.spare" and renamed to be the next new segments, written over
// from the start, so that an fdatasync finds the blocks already allocated
// and commits no metadata (appending made it commit the file's growth
// each time: half again the CPU per sync, twice the wait). A recycled
// segment holds its earlier content after its records; the end marker,
// or a frame whose LSN is below the segment's first, is where they end.
// A version without recycling opens a log left by a clean Close (one
// segment: it cuts a reused segment's earlier content off as a torn
// tail, with a warning), but refuses as corruption a reused segment that
// is not the last, which a crash can leave. An flock on the file "LOCK" keeps a
// second process from opening the same log; the holder writes its pid
// into the file, and the refusal names it.
//
// # Recovery
//
// Open reads every segment, checks each frame's CRCs and that LSNs run on
// without gaps up to where its records end (the end marker, a recycled
// segment's earlier content, or the end of the file), and calls the
// replay function for every record after the release mark. An end marker
// or earlier content followed by a valid frame of a later write is not an
// end but corruption (zeroed or lost blocks among synced records). Only the last write can be unsynced at a crash, and it is
// always in the last segment, so a bad frame there is a torn tail when no
// valid frame of a later write follows it: Open truncates the segment at
// the bad frame and logs a warning naming the file, the offset and the
// reason; the records it drops were never acknowledged. Any other bad frame
// (in an older segment, or followed by a valid frame of a later, hence
// synced-after, write) is corruption of acknowledged data: Open fails with
// a [*CorruptError] naming the segment and offset, and the records after
// it are refused, not silently dropped. [Options.TruncateCorrupt] makes
// Open truncate there instead, dropping those records, with a warning; it
// is the operator's choice. A bit flip in the very last frame cannot be
// told from a torn write and is truncated like one.
//
// # How termserver uses it
//
// Every accepted message, reply and dedupe change is appended here before
// the ack goes out; this is the only fsync on the message path. The
// nanobot session JSONL files, the format users read and tools consume,
// are written from the log afterwards without a per-record fsync. After a
// crash, Open replays the unreleased records and the session files are
// brought up to date from them (skipping records a file already holds).
// Once the session files are synced (one syncfs for all of them), the
// server calls Release with the last LSN they hold, and whole segments
// below it are recycled or deleted.
package wal
