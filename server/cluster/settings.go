package cluster

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/settings"
)

// The settings pushed to devices (issue 28, issue 39 item 3) are package
// settings' Store over SettingsStorage: each channel's documents in one
// record of KV termlink_settings, written by compare-and-set on the
// record's revision, so that two nodes' changes of one channel at once
// are both kept and the channel's version stays one sequence across the
// cluster. Every node follows the bucket with a watch (Follow): a change
// made through any node reaches every node's Store, which pushes it to
// the devices connected to it (each device gets it once, through its own
// edge). This file is storage only: every rule (the documents, their
// bounds, the version, the pushes, the acks) is package settings', which
// parses every record read here as strictly as its file.

// SettingsBucket holds every channel's settings record (key: "c." and
// the channel id in unpadded base64url).
const SettingsBucket = "termlink_settings"

const (
	// settingsMaxValue bounds one channel's record (under NATS's default
	// max_payload of 1 MiB): the Store refuses a change past it (507).
	settingsMaxValue = 768 << 10
	// settingsMaxBytes bounds the bucket (History 1: the records only).
	settingsMaxBytes = 64 << 20
	// settingsRewatch is the pause before a lost watch is made again.
	settingsRewatch = time.Second
)

// SettingsStorage is settings.Storage on KV termlink_settings, shared by
// every node.
type SettingsStorage struct {
	n   *Node
	kv  jetstream.KeyValue
	log *slog.Logger
}

var _ settings.Storage = (*SettingsStorage)(nil)

// SettingsStorage makes (or finds) the settings bucket, trying again
// while JetStream does not answer, until ctx ends; log (nil: the
// node's) takes what it refuses.
func (n *Node) SettingsStorage(ctx context.Context, log *slog.Logger) (*SettingsStorage, error) {
	if log == nil {
		log = n.log
	}
	kv, err := ensure(ctx, "bucket "+SettingsBucket, func(ctx context.Context) (jetstream.KeyValue, error) {
		return n.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: SettingsBucket,
			Description: "termlink: settings pushed to devices, one record per channel",
			History:     1, Replicas: n.cfg.Replicas, Storage: jetstream.FileStorage,
			MaxBytes: settingsMaxBytes, MaxValueSize: settingsMaxValue})
	})
	if err != nil {
		return nil, err
	}
	return &SettingsStorage{n: n, kv: kv, log: log}, nil
}

// OpenSettings returns the cluster's settings: package settings' Store
// over the node's SettingsStorage, loaded (the watch's first values)
// before it returns, or an error once ctx ends.
func (n *Node) OpenSettings(ctx context.Context, opt settings.Options, deps settings.Deps) (*settings.Store, error) {
	if opt.Log == nil {
		opt.Log = n.log
	}
	st, err := n.SettingsStorage(ctx, opt.Log)
	if err != nil {
		return nil, err
	}
	return settings.New(ctx, st, opt, deps)
}

// SettingsKey is channelID's key in the bucket.
func SettingsKey(channelID string) string {
	return "c." + base64.RawURLEncoding.EncodeToString([]byte(channelID))
}

// settingsChannel is the channel of a key (false: not a key of ours).
func settingsChannel(key string) (string, bool) {
	enc, ok := strings.CutPrefix(key, "c.")
	if !ok || enc == "" {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(b) == 0 {
		return "", false
	}
	return string(b), true
}

// Info implements settings.Storage.
func (s *SettingsStorage) Info() settings.StorageInfo {
	return settings.StorageInfo{Shared: true, MaxRecordBytes: settingsMaxValue}
}

// Where implements settings.Storage.
func (s *SettingsStorage) Where(channelID string) string {
	return "KV " + SettingsBucket + " key " + SettingsKey(channelID) + " (channel " + channelID + ")"
}

// Close implements settings.Storage: the node is its owner's to close.
func (s *SettingsStorage) Close() error { return nil }

// Follow implements settings.Storage: a watch of the whole bucket (its
// records, then Loaded, then every change), made again when it ends,
// until ctx or the node's own ends. A watch made again brings every
// record again: the Store keeps only what is newer than what it holds.
// A key that is not a channel's is refused, naming it.
func (s *SettingsStorage) Follow(ctx context.Context, f settings.Feed) error {
	s.n.followKV(ctx, s.log, s.kv, nil, "settings", settingsRewatch, f.Loaded, func(e jetstream.KeyValueEntry) {
		ch, ok := settingsChannel(e.Key())
		if !ok {
			s.log.Error("cluster: a key in the settings bucket is refused: not a channel's (c.<base64url of the channel id>)",
				"bucket", SettingsBucket, "key", e.Key())
			return
		}
		if e.Operation() == jetstream.KeyValuePut {
			f.Put(ch, e.Value(), e.Revision())
		} else {
			f.Gone(ch, e.Revision())
		}
	})
	return nil
}

// Get implements settings.Storage, at the stream's leader.
func (s *SettingsStorage) Get(ctx context.Context, channelID string) ([]byte, uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	data, rev, err := s.n.kvGet(ctx, s.kv, SettingsKey(channelID))
	if err != nil {
		return nil, 0, fmt.Errorf("cluster: reading %s: %w", s.Where(channelID), err)
	}
	return data, rev, nil
}

// Put implements settings.Storage: a create (rev 0) or an update at rev.
func (s *SettingsStorage) Put(ctx context.Context, channelID string, value []byte, rev uint64) (uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	nrev, err := kvWrite(ctx, s.kv, SettingsKey(channelID), value, rev)
	if errors.Is(err, ErrConflict) {
		return 0, settings.ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("cluster: writing %s: %w", s.Where(channelID), err)
	}
	return nrev, nil
}
