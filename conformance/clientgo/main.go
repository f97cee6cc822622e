// Command informers checks client-go's SharedInformer against a Kubernetes API endpoint: typed
// clients write ConfigMaps with protobuf bodies (client-go's default) while an informer follows
// the namespace. The informer must see every acknowledged create and update at its RV and every
// delete, and its store must end equal to a LIST. With KUBE_FEATURE_WatchListClient=true the
// informer's reflector uses WatchList (sendInitialEvents) instead of LIST then WATCH.
//
// Usage: informers SERVER_URL|KUBECONFIG NAMESPACE: a plain http:// URL, or a kubeconfig file
// (its server, CA and credentials, as kubectl reads them). Prints a one-line JSON summary;
// exits 1 on a mismatch.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

type seen struct {
	sync.Mutex
	rvs     map[string]bool // name@rv of every add and update observed
	deleted map[string]int  // deletes observed per name
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "informers: "+format+"\n", args...)
	os.Exit(1)
}

func key(name, rv string) string { return name + "@" + rv }

func main() {
	if len(os.Args) != 3 {
		fail("usage: informers SERVER_URL|KUBECONFIG NAMESPACE")
	}
	cfg := &rest.Config{Host: os.Args[1]}
	if !strings.HasPrefix(os.Args[1], "http://") {
		loaded, err := clientcmd.BuildConfigFromFlags("", os.Args[1])
		if err != nil {
			fail("kubeconfig %s: %v", os.Args[1], err)
		}
		cfg = loaded
	}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	// client-go throttles to 5 requests/s by default; the server's own bounds apply instead.
	cfg.QPS, cfg.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail("%v", err)
	}
	ns := os.Args[2]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		fail("create namespace: %v", err)
	}
	defer cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	cms := cs.CoreV1().ConfigMaps(ns)
	// Some state before the informer starts: its initial list (or WatchList) must carry it.
	for i := 0; i < 20; i++ {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pre-%02d", i)}, Data: map[string]string{"i": fmt.Sprint(i)}}, metav1.CreateOptions{}); err != nil {
			fail("create: %v", err)
		}
	}

	s := &seen{rvs: map[string]bool{}, deleted: map[string]int{}}
	note := func(obj interface{}) {
		cm := obj.(*corev1.ConfigMap)
		s.Lock()
		s.rvs[key(cm.Name, cm.ResourceVersion)] = true
		s.Unlock()
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().ConfigMaps().Informer()
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    note,
		UpdateFunc: func(_, obj interface{}) { note(obj) },
		DeleteFunc: func(obj interface{}) {
			name := ""
			switch o := obj.(type) {
			case *corev1.ConfigMap:
				name = o.Name
			case cache.DeletedFinalStateUnknown:
				name = o.Obj.(*corev1.ConfigMap).Name
			}
			s.Lock()
			s.deleted[name]++
			s.Unlock()
		},
	})
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		fail("the informer did not sync")
	}

	// Acknowledged writes: every create and update with the RV the server answered; deletes by name.
	acked := map[string]bool{}
	deletes := map[string]int{}
	rng := rand.New(rand.NewSource(42))
	live := map[string]bool{}
	for i := 0; i < 20; i++ {
		live[fmt.Sprintf("pre-%02d", i)] = true
	}
	for i := 0; i < 200; i++ {
		name := fmt.Sprintf("cm-%02d", rng.Intn(30))
		switch {
		case !live[name]:
			cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"n": fmt.Sprint(i)}}, metav1.CreateOptions{})
			if err != nil {
				fail("create %s: %v", name, err)
			}
			acked[key(name, cm.ResourceVersion)] = true
			live[name] = true
		case rng.Intn(3) == 0:
			if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				fail("delete %s: %v", name, err)
			}
			deletes[name]++
			delete(live, name)
		default:
			cm, err := cms.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				fail("get %s: %v", name, err)
			}
			cm.Data["n"] = fmt.Sprint(i)
			cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
			if err != nil {
				fail("update %s: %v", name, err)
			}
			acked[key(name, cm.ResourceVersion)] = true
		}
	}

	// The informer must catch up: every acknowledged write seen, and its store equal to a LIST.
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := cms.List(ctx, metav1.ListOptions{})
		if err != nil {
			fail("list: %v", err)
		}
		want := []string{}
		for _, cm := range list.Items {
			want = append(want, key(cm.Name, cm.ResourceVersion))
		}
		got := []string{}
		for _, o := range inf.GetStore().List() {
			cm := o.(*corev1.ConfigMap)
			got = append(got, key(cm.Name, cm.ResourceVersion))
		}
		sort.Strings(want)
		sort.Strings(got)
		s.Lock()
		missing := []string{}
		for k := range acked {
			if !s.rvs[k] {
				missing = append(missing, k)
			}
		}
		for name, n := range deletes {
			if s.deleted[name] < n {
				missing = append(missing, "delete of "+name)
			}
		}
		s.Unlock()
		equal := fmt.Sprint(want) == fmt.Sprint(got)
		if equal && len(missing) == 0 {
			out, _ := json.Marshal(map[string]interface{}{"writes": len(acked), "deletes": len(deletes), "objects": len(want), "listRV": list.ResourceVersion})
			fmt.Println(string(out))
			return
		}
		if time.Now().After(deadline) {
			sort.Strings(missing)
			fail("after 30 s: store equals LIST: %v; acknowledged writes not seen: %v", equal, missing)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
