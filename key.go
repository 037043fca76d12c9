package idem

import "github.com/idemgo/idem/idemstore"

// Key names one unit of work: a job and the business period the run is for.
//
// Period is the period the work is FOR ("2026-10-27" for the settlement of
// 27 October), never the wall-clock time the run started: a re-run tomorrow of
// yesterday's settlement must produce the same Key. Schedules such as [Daily]
// compute it. Its methods (Validate, String, RequestID, ItemRequestID) are
// those of [idemstore.Key], where stores see it.
type Key = idemstore.Key

// KeyError describes an invalid [Key] (or an invalid job given to
// catchup.Run). It matches [ErrInvalidKey]. Its message quotes each part of
// the key escaped and, past 64 bytes, cut short and followed by its length
// ("xxxx"… (10240 bytes)); Key holds them whole.
type KeyError = idemstore.KeyError
