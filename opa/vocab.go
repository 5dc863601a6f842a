package opa

import (
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/internal/verdict"
	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa/policy"
)

// The engine's vocabulary, defined in package policy, under the names its
// callers have always used.
type (
	// Action is what a violated constraint does at this enforcement point.
	Action = policy.Action
	// ConstraintKey names a constraint: its kind and name.
	ConstraintKey = policy.ConstraintKey
)

const (
	Deny   = policy.Deny
	Warn   = policy.Warn
	DryRun = policy.DryRun

	DefaultEnforcementPoint = policy.DefaultEnforcementPoint
	ActionAnnotation        = policy.ActionAnnotation
	TemplateGroup           = policy.TemplateGroup
	ConstraintGroup         = policy.ConstraintGroup
	TargetName              = policy.TargetName
)

// What sources send to Apply, defined in package policy.
type (
	// Change is one object added, updated or removed.
	Change = policy.Change
	// ObjectRef identifies an object for removal.
	ObjectRef = policy.ObjectRef
	// ApplyError reports one change that was refused.
	ApplyError = policy.ApplyError
)

// The writers deny messages are written to (Placement.WriteDenyMessage).
type (
	// MessageWriter receives a deny message a piece at a time.
	MessageWriter = verdict.MessageWriter
	// PlainWriter is a MessageWriter told which pieces are plain text.
	PlainWriter = verdict.PlainWriter
)
