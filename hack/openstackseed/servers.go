package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gcos "github.com/gophercloud/gophercloud/v2/openstack"

	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

// The servers of the estate step: the image and flavor they boot from, booting them
// and waiting until they are active.

const (
	imageName  = "bnerd-tiny"
	flavorName = "bnerd.tiny"
)

// servers boots the seeded servers (no network: the nodes' interfaces are the tests'
// business) on the fake hypervisor and waits for them to be ACTIVE.
// errBootFailed: Nova put a server into ERROR. On the all-in-one test clouds that is
// nearly always sqlite's "database is locked" under load in the conductor or compute
// service, not a property of the server, so the boot is tried again.
var errBootFailed = errors.New("failed to boot")

// servers boots the estate's servers, trying a boot that ended in ERROR up to twice
// more (a later pass deletes the ERROR server and boots it afresh).
func (s *seeder) servers(ctx context.Context, servers []openstacksim.SeedServer, projects map[string]*project, adminCompute *gophercloud.ServiceClient, ids stateMap) error {
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if err = s.bootServers(ctx, servers, projects, adminCompute, ids); err == nil || !errors.Is(err, errBootFailed) {
			return err
		}
		if attempt < 3 {
			s.log("%v; booting again (attempt %d of 3)", err, attempt+1)
		}
	}
	return err
}

func (s *seeder) bootServers(ctx context.Context, servers []openstacksim.SeedServer, projects map[string]*project, adminCompute *gophercloud.ServiceClient, ids stateMap) error {
	image, err := gcos.NewImageV2(s.admin, gophercloud.EndpointOpts{Region: region})
	if err != nil {
		return err
	}
	imgs, err := list(ctx, image, "images", url.Values{"name": {imageName}})
	if err != nil {
		return err
	}
	var imageID string
	for _, im := range imgs {
		if str(im, "status") == "active" {
			imageID = str(im, "id")
		}
	}
	if imageID == "" {
		var im obj
		if err := call(ctx, image, "POST", "images", obj{"name": imageName, "disk_format": "raw",
			"container_format": "bare", "visibility": "public"}, &im, 201); err != nil {
			return err
		}
		imageID = str(im, "id")
		if _, err := image.Request(ctx, "PUT", image.ServiceURL("images", imageID, "file"), &gophercloud.RequestOpts{
			RawBody: strings.NewReader(strings.Repeat("\x00", 1<<16)), OkCodes: []int{204},
			MoreHeaders: map[string]string{"Content-Type": "application/octet-stream"},
		}); err != nil {
			return fmt.Errorf("image upload: %w", err)
		}
	}
	flavors, err := list(ctx, adminCompute, "flavors", nil)
	if err != nil {
		return err
	}
	var flavorID string
	for _, f := range flavors {
		if str(f, "name") == flavorName {
			flavorID = str(f, "id")
		}
	}
	if flavorID == "" {
		var out struct{ Flavor obj }
		if err := call(ctx, adminCompute, "POST", "flavors", obj{"flavor": obj{"name": flavorName, "ram": 64, "vcpus": 1, "disk": 1}}, &out, 200); err != nil {
			return err
		}
		flavorID = str(out.Flavor, "id")
	}
	// The compute host must be mapped into the cell before the scheduler can place.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		hv, err := list(ctx, adminCompute, "os-hypervisors", nil)
		if err == nil && len(hv) > 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no hypervisor in Nova after 5 minutes (%v)", err)
		}
		time.Sleep(time.Second)
	}
	type pending struct{ key, id string }
	var boot []pending
	for _, sv := range servers {
		pr := projects[sv.Project]
		if pr == nil {
			return fmt.Errorf("server %s: unknown project %s", sv.Name, sv.Project)
		}
		k := sv.Project + "/" + sv.Name
		have, err := list(ctx, pr.compute, "servers/detail", url.Values{"name": {"^" + sv.Name + "$"}})
		if err != nil {
			return err
		}
		var id string
		for _, h := range have {
			if str(h, "name") != sv.Name {
				continue
			}
			if str(h, "status") == "ERROR" {
				// A failed boot of an earlier run: replace it.
				if err := call(ctx, pr.compute, "DELETE", "servers/"+str(h, "id"), nil, nil, 204); err != nil {
					return err
				}
				if err := waitGone(ctx, pr.compute, str(h, "id")); err != nil {
					return err
				}
				continue
			}
			id = str(h, "id")
		}
		if id == "" {
			var out struct{ Server obj }
			if err := call(ctx, pr.compute, "POST", "servers", obj{"server": obj{"name": sv.Name, "imageRef": imageID,
				"flavorRef": flavorID, "networks": "none"}}, &out, 202); err != nil {
				return fmt.Errorf("server %s: %w", sv.Name, err)
			}
			id = str(out.Server, "id")
			s.log("booting server %s (%s)", k, id)
			if s.serialBoots {
				if err := waitActive(ctx, adminCompute, k, id, deadline); err != nil {
					return err
				}
			}
		}
		ids[k] = id
		boot = append(boot, pending{k, id})
	}
	for _, b := range boot {
		if err := waitActive(ctx, adminCompute, b.key, b.id, deadline); err != nil {
			return err
		}
	}
	return nil
}

// waitActive waits until a booting server is ACTIVE, failing on ERROR or at deadline.
func waitActive(ctx context.Context, adminCompute *gophercloud.ServiceClient, key, id string, deadline time.Time) error {
	for {
		var out struct{ Server obj }
		if err := call(ctx, adminCompute, "GET", "servers/"+id, nil, &out, 200); err != nil {
			return err
		}
		st := str(out.Server, "status")
		if st == "ACTIVE" {
			return nil
		}
		if st == "ERROR" {
			fault, _ := json.Marshal(out.Server["fault"])
			return fmt.Errorf("server %s %w: %s", key, errBootFailed, fault)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server %s still %s after 5 minutes", key, st)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
