package storetest

import (
	"errors"
	"reflect"
	"testing"

	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/store"
)

func (h harness) profiles(t *testing.T) {
	t.Run("RoundTripEveryField", func(t *testing.T) {
		s := h.store(t)
		want := fullProfile("reviewer")
		if err := s.SaveAgentProfile(ctx(t), want); err != nil {
			t.Fatalf("SaveAgentProfile: %v", err)
		}
		got, err := s.LoadAgentProfile(ctx(t), "reviewer")
		if err != nil {
			t.Fatalf("LoadAgentProfile: %v", err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("profile after round trip:\n got  %+v\n want %+v", got, want)
		}
		minimal := profile.Profile{ID: "bare", Name: "Bare"}
		if err := s.SaveAgentProfile(ctx(t), minimal); err != nil {
			t.Fatal(err)
		}
		got, err = s.LoadAgentProfile(ctx(t), "bare")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, minimal) {
			t.Errorf("minimal profile after round trip:\n got  %+v\n want %+v", got, minimal)
		}
	})

	t.Run("UpsertReplaces", func(t *testing.T) {
		s := h.store(t)
		if err := s.SaveAgentProfile(ctx(t), fullProfile("p")); err != nil {
			t.Fatal(err)
		}
		want := profile.Profile{ID: "p", Name: "Replaced", Model: "other-model"}
		if err := s.SaveAgentProfile(ctx(t), want); err != nil {
			t.Fatalf("SaveAgentProfile (replace): %v", err)
		}
		got, err := s.LoadAgentProfile(ctx(t), "p")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("profile after upsert:\n got  %+v\n want %+v", got, want)
		}
		list, err := s.ListAgentProfiles(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 {
			t.Errorf("ListAgentProfiles after upsert holds %d profiles, want 1", len(list))
		}
	})

	t.Run("ListSortedByID", func(t *testing.T) {
		s := h.store(t)
		list, err := s.ListAgentProfiles(ctx(t))
		if err != nil {
			t.Fatalf("ListAgentProfiles on an empty store: %v", err)
		}
		if len(list) != 0 {
			t.Fatalf("ListAgentProfiles on an empty store returned %d profiles", len(list))
		}
		for _, id := range []string{"zeta", "alpha", "Beta", "mid-1", "mid_1"} {
			if err := s.SaveAgentProfile(ctx(t), fullProfile(id)); err != nil {
				t.Fatal(err)
			}
		}
		list, err = s.ListAgentProfiles(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range list {
			got = append(got, p.ID)
			if want := fullProfile(p.ID); !reflect.DeepEqual(p, want) {
				t.Errorf("listed profile %q differs from the saved one", p.ID)
			}
		}
		if want := []string{"Beta", "alpha", "mid-1", "mid_1", "zeta"}; !equalStrings(got, want) {
			t.Errorf("ListAgentProfiles order = %q, want %q", got, want)
		}
	})

	t.Run("LoadMissingIsErrNotFound", func(t *testing.T) {
		s := h.store(t)
		if err := s.SaveAgentProfile(ctx(t), fullProfile("present")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LoadAgentProfile(ctx(t), "absent"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("LoadAgentProfile of a missing id: got %v, want ErrNotFound", err)
		}
	})
}
